/**
 * @tps/model: the resources the control plane, the edge and the portal share. Each is a TypeBox
 * schema (the API validates with it and the OpenAPI document is generated from it) and the static
 * type derived from it. Nothing here imports the service's own code: it is the bottom layer.
 */
export * from './schema-helpers.ts';
export * from './countries.ts';
export * from './traffic-config.ts';
export * from './certificate.ts';
export * from './insight-event.ts';
