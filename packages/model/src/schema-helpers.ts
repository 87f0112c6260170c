/**
 * Building blocks of the model's schemas: one spelling of ids, timestamps, closed sets and
 * nullable values, so that validation errors and the OpenAPI document read the same everywhere.
 */
import { Type, type SchemaOptions, type Static, type TSchema, type TUnion, type TUnsafe } from '@sinclair/typebox';

export const Uuid = Type.String({ format: 'uuid', description: 'UUID.' });

/** `relationships` of a request body: it may name the account, which must be the caller's own. */
export const AccountRelationship = Type.Optional(
  Type.Object({
    belongsTo: Type.Object({
      data: Type.Object({ type: Type.Literal('account'), id: Uuid }),
    }),
  }),
);

export const ReadOnlyTimestamps = {
  createdAt: Type.Optional(Type.String({ format: 'date-time', readOnly: true })),
  updatedAt: Type.Optional(Type.String({ format: 'date-time', readOnly: true })),
};

/**
 * A union that JSON Schema and OpenAPI can discriminate by one property (`oneOf` + `discriminator`):
 * validation errors then come from the branch the discriminator picks, not from every branch.
 * `type: object` is part of it: Ajv applies the discriminator (and skips the oneOf) on objects only,
 * so without it null, a string or an array would pass unchecked.
 */
export function DiscriminatedUnion<T extends TSchema[]>(propertyName: string, schemas: [...T]): TUnion<T> {
  return Type.Unsafe<Static<TUnion<T>>>({ type: 'object', oneOf: schemas, discriminator: { propertyName } }) as unknown as TUnion<T>;
}

/** A closed set of values as one JSON Schema `enum`, so a wrong value gets one clear error listing the allowed ones. */
export function Enum<const T extends readonly (string | number)[]>(values: T, options: SchemaOptions = {}): TUnsafe<T[number]> {
  return Type.Unsafe<T[number]>({ ...options, type: typeof values[0] === 'number' ? 'integer' : 'string', enum: [...values] });
}

/**
 * A value that may also be null, as `type: [T, "null"]` rather than `anyOf`: validators apply the
 * defaults inside it (they skip defaults within anyOf branches) and errors point inside it.
 */
export function Nullable<T extends TSchema>(schema: T): TUnsafe<Static<T> | null> {
  const { type } = schema as { type?: string };
  if (typeof type !== 'string') throw new Error('Nullable needs a schema with a single type');
  return Type.Unsafe<Static<T> | null>({ ...schema, type: [type, 'null'] });
}
