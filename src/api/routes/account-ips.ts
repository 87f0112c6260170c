/**
 * The account's front-end IPs (the operator's pool, TPS_FRONTEND_IPS) with the ports proxies hold
 * on each: what a tenant picks a proxy's front end from.
 */
import crypto from 'node:crypto';
import net from 'node:net';
import { Type } from '@sinclair/typebox';
import { Uuid } from '@tps/model';
import type { RoutePlugin } from '../types.ts';
import { JSONAPI_MEDIA_TYPE, notFound } from '../jsonapi.ts';
import { canonicalIp } from '../../net/ip.ts';

const IpResource = Type.Object({
  type: Type.Literal('ip'),
  id: Uuid,
  attributes: Type.Object({
    address: Type.String(),
    version: Type.Integer({ enum: [4, 6] }),
    assignedPorts: Type.Array(Type.Object({ port: Type.Integer(), protocol: Type.String({ enum: ['TCP', 'UDP'] }) }), {
      description: 'Ports already taken on this IP (by any proxy): pick another one.',
    }),
  }),
});

/** A stable UUID per address (name-based, RFC 4122 version 5 layout), so an IP keeps its id. */
export function ipId(address: string): string {
  const hash = crypto
    .createHash('sha1')
    .update(`tps-frontend-ip:${canonicalIp(address)}`)
    .digest();
  hash[6] = (hash[6]! & 0x0f) | 0x50;
  hash[8] = (hash[8]! & 0x3f) | 0x80;
  const hex = hash.subarray(0, 16).toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20, 32)}`;
}

export const accountIpRoutes: RoutePlugin = async (app, { deps }) => {
  app.get(
    '/api/v1/traffic-mgmt/accounts/:tenantId/ips',
    {
      config: { scope: 'read' },
      schema: {
        tags: ['front-end IPs'],
        security: [{ bearer: [] }],
        summary: "The account's available front-end IPs",
        description: 'An IP can front several proxies as long as each uses another port (per protocol).',
        params: Type.Object({ tenantId: Uuid }),
        response: { 200: Type.Object({ data: Type.Array(IpResource) }) },
      },
    },
    async (request, reply) => {
      const { tenantId } = request.params;
      // Another tenant's account is answered as unknown: its existence is not revealed.
      if (tenantId !== request.principal!.tenantId) throw notFound('account', tenantId);
      const bindings = await deps.store.db.all<{ ip: string; port: number; protocol: string }>(
        'SELECT ip, port, protocol FROM frontend_bindings ORDER BY ip, port, protocol',
      );
      void reply.type(JSONAPI_MEDIA_TYPE);
      return {
        data: deps.settings.frontendIps.map((address) => ({
          type: 'ip' as const,
          id: ipId(address),
          attributes: {
            address,
            version: net.isIPv6(address) ? 6 : 4,
            assignedPorts: bindings
              .filter((binding) => binding.ip === canonicalIp(address))
              .map((binding) => ({ port: Number(binding.port), protocol: binding.protocol })),
          },
        })),
      };
    },
  );
};
