import { useMemo } from 'preact/hooks';
import type { IpAttributes, Resource } from '../../api.ts';

/** Which ports are taken on the chosen IPs, and a free one to pick. */
export function PortHint(props: {
  ips: Resource<IpAttributes>[];
  chosen: (string | undefined)[];
  port: number | undefined;
  protocols: string[];
  own: { port: number; ips: (string | undefined)[] } | undefined;
  onPick: (port: number) => void;
}) {
  const chosen = props.ips.filter((ip) => props.chosen.includes(ip.attributes.address));
  const taken = useMemo(() => {
    const ports = new Map<string, Set<number>>();
    for (const ip of chosen) {
      const set = new Set<number>();
      for (const assigned of ip.attributes.assignedPorts) {
        const mine = props.own && props.own.port === assigned.port && props.own.ips.includes(ip.attributes.address);
        if (!mine && props.protocols.includes(assigned.protocol)) set.add(assigned.port);
      }
      ports.set(ip.attributes.address, set);
    }
    return ports;
  }, [chosen.map((ip) => ip.id).join(), props.protocols.join()]);
  if (chosen.length === 0) return <span>Choose an IP to see its free ports.</span>;
  const isFree = (port: number) => [...taken.values()].every((set) => !set.has(port));
  const suggestions: number[] = [];
  for (const candidate of [80, 443, 8080, 8443, ...(props.port ? [props.port + 1, props.port + 2] : [])]) {
    if (candidate <= 65535 && isFree(candidate) && candidate !== props.port && !suggestions.includes(candidate))
      suggestions.push(candidate);
  }
  const allTaken = [...new Set([...taken.values()].flatMap((set) => [...set]))].sort((a, b) => a - b);
  return (
    <span data-testid="port-hint">
      {props.port !== undefined &&
        Number.isInteger(props.port) &&
        props.port >= 1 &&
        props.port <= 65535 &&
        (isFree(props.port) ? (
          <span class="ok-text">
            Port {props.port} is free on {chosen.map((ip) => ip.attributes.address).join(' and ')}.{' '}
          </span>
        ) : (
          <span class="error-text">
            Port {props.port} is taken on{' '}
            {[...taken]
              .filter(([, set]) => set.has(props.port!))
              .map(([ip]) => ip)
              .join(' and ')}
            .{' '}
          </span>
        ))}
      {allTaken.length > 0 ? (
        <>
          In use: {allTaken.slice(0, 12).join(', ')}
          {allTaken.length > 12 ? '…' : ''}.{' '}
        </>
      ) : (
        <>No port is in use there yet. </>
      )}
      {suggestions.length > 0 && (
        <>
          Free:{' '}
          {suggestions.slice(0, 4).map((port) => (
            <button type="button" class="link-button" onClick={() => props.onPick(port)}>
              {port}
            </button>
          ))}
        </>
      )}
    </span>
  );
}
