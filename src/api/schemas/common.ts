import { Type, type Static, type TSchema, type TUnion } from '@sinclair/typebox';

export const Uuid = Type.String({ format: 'uuid', description: 'UUID.' });

export const ReadOnlyTimestamps = {
  createdAt: Type.Optional(Type.String({ format: 'date-time', readOnly: true })),
  updatedAt: Type.Optional(Type.String({ format: 'date-time', readOnly: true })),
};

/**
 * A union that JSON Schema and OpenAPI can discriminate by one property (`oneOf` + `discriminator`):
 * validation errors then come from the branch the discriminator picks, not from every branch.
 */
export function DiscriminatedUnion<T extends TSchema[]>(propertyName: string, schemas: [...T]): TUnion<T> {
  return Type.Unsafe<Static<TUnion<T>>>({ oneOf: schemas, discriminator: { propertyName } }) as unknown as TUnion<T>;
}
