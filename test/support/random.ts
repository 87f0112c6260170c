/**
 * A seeded xorshift32 generator: the same numbers on every run, so that generated test data and
 * benchmark inputs are reproducible (Math.random cannot be seeded). Not for anything secret.
 */
export function xorshift(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state ^= state << 13;
    state >>>= 0;
    state ^= state >>> 17;
    state ^= state << 5;
    state >>>= 0;
    return state;
  };
}
