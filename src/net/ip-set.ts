/**
 * A set of IPv4 and IPv6 networks (CIDR prefixes) with a membership test that costs O(prefix
 * length), whatever the number of entries: a path-compressed binary radix trie (PATRICIA) kept in
 * typed arrays, so half a million prefixes are a few flat arrays rather than millions of objects
 * for the garbage collector to walk.
 *
 * One address space serves both families: IPv4 addresses live at ::ffff:0:0/96 (RFC 4291 IPv4-mapped
 * addresses), so `1.2.3.0/24` is stored as `::ffff:1.2.3.0/120` and a client a dual-stack socket
 * reports as `::ffff:1.2.3.4` matches it with no special case.
 *
 * Only membership is asked, so a prefix covered by a shorter one is never stored (and adding the
 * shorter one drops the longer ones below it). Every terminal node is then a leaf, and a lookup
 * walks bits to the single leaf on its path and compares once.
 *
 * A built set can be copied into SharedArrayBuffers (`toShared`) and seen from any thread as a
 * read-only set over that memory (`IpSet.fromShared`): one edge node builds its threat feed once
 * and every proxy worker looks up in the same bytes, without a copy per worker.
 */

const WORDS = 4;
const NONE = -1;
const NODE_INTS = 3;
const META = 2;
/** Added to a node's length (0-128) in its meta int when the node's prefix is in the set. */
const TERMINAL = 256;
const LENGTH_MASK = 255;
const INITIAL_CAPACITY = 1024;
/** Below this many nodes, IPv4 lookups start from the root (the start table would save little). */
const IPV4_START_MIN_NODES = 1024;

/** Family of a parsed address: what its CIDR length counts. */
export type IpFamily = 4 | 6;

/**
 * A built set in shared memory, as `IpSet.toShared` makes it and `IpSet.fromShared` reads it; it
 * crosses threads with postMessage or workerData, which share the buffers rather than copy them.
 */
export interface SharedIpSet {
  /** NODE_INTS int32 per node (children and meta), exactly `nodeCount` nodes. */
  nodes: SharedArrayBuffer;
  /** WORDS uint32 per node: each node's key. */
  keys: SharedArrayBuffer;
  /** The IPv4 start table (65,536 int32), present when the set is large enough to use it. */
  ipv4Start: SharedArrayBuffer | null;
  nodeCount: number;
  /** Disjoint prefixes stored (`IpSet.size`). */
  size: number;
}

export interface ParsedPrefix {
  family: IpFamily;
  /** Prefix length in the family's own terms (0-32 for IPv4, 0-128 for IPv6). */
  length: number;
}

// Scratch space for parsing on the lookup path: one per module, no allocation per call.
const scratchKey = new Uint32Array(WORDS);
const scratchGroups = new Uint16Array(8);

/**
 * Parses `text[start, end)` as an IPv4 or IPv6 address into `out` (four 32-bit words, IPv4 as
 * IPv4-mapped). A zone (`fe80::1%eth0`) is ignored. Returns the family, or 0 when it is not an address.
 */
export function parseIpInto(text: string, out: Uint32Array, start = 0, end = text.length): IpFamily | 0 {
  // Scans stay inside [start, end): the text may be a whole feed of which this is one line.
  let hasColon = false;
  for (let i = start; i < end; i++) {
    const code = text.charCodeAt(i);
    if (code === 58 /* : */) hasColon = true;
    else if (code === 37 /* % */) {
      end = i;
      break;
    }
  }
  if (end - start < 2) return 0;
  if (!hasColon) {
    const v4 = parseIpv4(text, start, end);
    if (v4 < 0) return 0;
    out[0] = 0;
    out[1] = 0;
    out[2] = 0xffff;
    out[3] = v4;
    return 4;
  }
  return parseIpv6(text, start, end, out) ? 6 : 0;
}

/** An IPv4 address as an unsigned 32-bit number, or -1. */
function parseIpv4(text: string, start: number, end: number): number {
  let value = 0;
  let octet = 0;
  let digits = 0;
  let dots = 0;
  for (let i = start; i < end; i++) {
    const code = text.charCodeAt(i);
    if (code >= 48 && code <= 57) {
      octet = octet * 10 + (code - 48);
      if (++digits > 3 || octet > 255) return -1;
    } else if (code === 46 /* . */) {
      if (digits === 0 || ++dots > 3) return -1;
      value = value * 256 + octet;
      octet = 0;
      digits = 0;
    } else {
      return -1;
    }
  }
  if (digits === 0 || dots !== 3) return -1;
  return value * 256 + octet;
}

function parseIpv6(text: string, start: number, end: number, out: Uint32Array): boolean {
  const groups = scratchGroups;
  let count = 0;
  let gapAt = -1;
  let i = start;
  if (text.charCodeAt(i) === 58 /* : */) {
    if (text.charCodeAt(i + 1) !== 58) return false;
    gapAt = 0;
    i += 2;
    if (i === end) {
      groups.fill(0);
      return writeGroups(groups, out);
    }
  }
  while (i < end) {
    if (count === 8) return false;
    let value = 0;
    let digits = 0;
    const groupStart = i;
    while (i < end) {
      const code = text.charCodeAt(i);
      const nibble = hexValue(code);
      if (nibble < 0) break;
      value = value * 16 + nibble;
      if (++digits > 4) return false;
      i++;
    }
    if (i < end && text.charCodeAt(i) === 46 /* . */) {
      // An embedded IPv4 address ends the text and fills two groups.
      if (count > 6) return false;
      const v4 = parseIpv4(text, groupStart, end);
      if (v4 < 0) return false;
      groups[count++] = v4 >>> 16;
      groups[count++] = v4 & 0xffff;
      i = end;
      break;
    }
    if (digits === 0) return false;
    groups[count++] = value;
    if (i === end) break;
    if (text.charCodeAt(i) !== 58) return false;
    i++;
    if (text.charCodeAt(i) === 58) {
      if (gapAt !== -1) return false;
      gapAt = count;
      i++;
    } else if (i === end) {
      return false; // a trailing single colon
    }
  }
  if (gapAt === -1) {
    if (count !== 8) return false;
  } else {
    if (count === 8) return false;
    const moved = count - gapAt;
    for (let k = 1; k <= moved; k++) groups[8 - k] = groups[count - k]!;
    for (let k = gapAt; k < 8 - moved; k++) groups[k] = 0;
  }
  return writeGroups(groups, out);
}

function writeGroups(groups: Uint16Array, out: Uint32Array): true {
  for (let w = 0; w < WORDS; w++) out[w] = ((groups[2 * w]! << 16) | groups[2 * w + 1]!) >>> 0;
  return true;
}

function hexValue(code: number): number {
  if (code >= 48 && code <= 57) return code - 48;
  const lower = code | 0x20;
  if (lower >= 97 && lower <= 102) return lower - 87;
  return -1;
}

/**
 * Parses an address or CIDR (`203.0.113.0/24`, `2001:db8::/32`, `192.0.2.7`) into `out`, masked to
 * its prefix. Host bits set below the prefix (`192.0.2.7/24`) are cleared, as FireHOL's tools do.
 * Returns undefined when the text is not one.
 */
export function parsePrefixInto(text: string, out: Uint32Array, start = 0, end = text.length): ParsedPrefix | undefined {
  let addressEnd = start;
  while (addressEnd < end && text.charCodeAt(addressEnd) !== 47 /* / */) addressEnd++;
  const family = parseIpInto(text, out, start, addressEnd);
  if (family === 0) return undefined;
  const maxLength = family === 4 ? 32 : 128;
  let length = maxLength;
  if (addressEnd !== end) {
    length = 0;
    if (addressEnd + 1 === end || end - addressEnd > 4) return undefined;
    for (let i = addressEnd + 1; i < end; i++) {
      const code = text.charCodeAt(i);
      if (code < 48 || code > 57) return undefined;
      length = length * 10 + (code - 48);
    }
    if (length > maxLength) return undefined;
  }
  maskKey(out, family === 4 ? 96 + length : length);
  return { family, length };
}

function maskKey(key: Uint32Array, bits: number): void {
  for (let w = 0; w < WORDS; w++) {
    const keep = bits - 32 * w;
    if (keep >= 32) continue;
    key[w] = keep <= 0 ? 0 : (key[w]! & ~(0xffffffff >>> keep)) >>> 0;
  }
}

function bitAt(key: Uint32Array, offset: number, bit: number): number {
  return (key[offset + (bit >>> 5)]! >>> (31 - (bit & 31))) & 1;
}

export class IpSet {
  /** Disjoint prefixes stored (a prefix covered by another counts once, as the covering one). */
  private stored = 0;
  private nodeCount = 0;
  private capacity = 0;
  /**
   * NODE_INTS ints per node, kept together so that one step of a lookup touches one cache line:
   * child for bit 0, child for bit 1 (NONE for none), and the prefix length in the 128-bit space
   * with TERMINAL added when the prefix itself is in the set.
   */
  private nodes: Int32Array = new Int32Array(0);
  /** Key of each node, masked to its length: WORDS words per node; read once per lookup, at the leaf. */
  private keys: Uint32Array = new Uint32Array(0);
  /**
   * For each first 16 bits of an IPv4 address, the node a lookup may start from instead of the
   * root (the deepest node whose prefix is no longer than ::ffff:a.b/112). Built on demand, dropped
   * by every insert: it saves the ~17 top steps of each IPv4 lookup in a large set.
   */
  private ipv4Start: Int32Array | undefined;
  /** The shared memory this set is a read-only view of (`fromShared`), undefined for a set of its own. */
  private sharedFrom: SharedIpSet | undefined;

  constructor(initialCapacity = INITIAL_CAPACITY) {
    this.grow(Math.max(2, initialCapacity));
    this.newNode(scratchKey.fill(0), 0, 0, false); // the root: the empty prefix
  }

  /**
   * A read-only set over shared memory made by `toShared` (in this thread or another): no copy,
   * lookups as fast as on the original; `add` and `insert` throw. The memory is never written.
   */
  static fromShared(shared: SharedIpSet): IpSet {
    const { nodeCount } = shared;
    if (
      !Number.isInteger(nodeCount) ||
      nodeCount < 1 ||
      shared.nodes.byteLength !== 4 * NODE_INTS * nodeCount ||
      shared.keys.byteLength !== 4 * WORDS * nodeCount ||
      (shared.ipv4Start !== null && shared.ipv4Start.byteLength !== 4 * 65536)
    ) {
      throw new RangeError('not a shared IpSet: buffer sizes do not match the node count');
    }
    const set = new IpSet(0);
    set.nodes = new Int32Array(shared.nodes);
    set.keys = new Uint32Array(shared.keys);
    set.nodeCount = nodeCount;
    set.capacity = nodeCount;
    set.stored = shared.size;
    set.ipv4Start = shared.ipv4Start === null ? undefined : new Int32Array(shared.ipv4Start);
    set.sharedFrom = shared;
    return set;
  }

  /**
   * Copies the built set into SharedArrayBuffers, trimmed to its nodes, with the IPv4 start table
   * built (so that a view never has to build one). A view returns the memory it is over, uncopied.
   */
  toShared(): SharedIpSet {
    if (this.sharedFrom !== undefined) return this.sharedFrom;
    const nodes = new SharedArrayBuffer(4 * NODE_INTS * this.nodeCount);
    new Int32Array(nodes).set(this.nodes.subarray(0, NODE_INTS * this.nodeCount));
    const keys = new SharedArrayBuffer(4 * WORDS * this.nodeCount);
    new Uint32Array(keys).set(this.keys.subarray(0, WORDS * this.nodeCount));
    let ipv4Start: SharedArrayBuffer | null = null;
    if (this.nodeCount > IPV4_START_MIN_NODES) {
      ipv4Start = new SharedArrayBuffer(4 * 65536);
      new Int32Array(ipv4Start).set(this.ipv4Start ?? this.buildIpv4Start());
    }
    return { nodes, keys, ipv4Start, nodeCount: this.nodeCount, size: this.stored };
  }

  /** Whether this set is a read-only view over shared memory (`fromShared`). */
  get isShared(): boolean {
    return this.sharedFrom !== undefined;
  }

  /** Prefixes stored, after dropping those covered by shorter ones. */
  get size(): number {
    return this.stored;
  }

  /** Adds an address or CIDR; returns false (and adds nothing) when the text is neither. */
  add(cidr: string): boolean {
    const parsed = parsePrefixInto(cidr.trim(), scratchKey);
    if (parsed === undefined) return false;
    this.insert(scratchKey, parsed.family === 4 ? 96 + parsed.length : parsed.length);
    return true;
  }

  /**
   * Adds a prefix given as four words of the 128-bit space (IPv4 as ::ffff:a.b.c.d), read from `key`
   * at `offset`, and its length in that space. The key must already be masked to the length.
   */
  insert(key: Uint32Array, length: number, offset = 0): void {
    if (this.sharedFrom !== undefined) throw new TypeError('a shared IpSet is read-only');
    this.ipv4Start = undefined;
    let parent = 0;
    for (;;) {
      const parentMeta = this.nodes[NODE_INTS * parent + META]!;
      if (parentMeta >= TERMINAL) return; // already covered
      const parentLength = parentMeta;
      if (parentLength === length) {
        // This node is exactly the new prefix: everything below it is now covered.
        this.stored -= this.countTerminalsBelow(parent);
        this.setChildren(parent, NONE, NONE);
        this.nodes[NODE_INTS * parent + META] = length + TERMINAL;
        this.stored++;
        return;
      }
      const slot = NODE_INTS * parent + bitAt(key, offset, parentLength);
      const child = this.nodes[slot]!;
      if (child === NONE) {
        const leaf = this.newNode(key, offset, length, true);
        this.nodes[slot] = leaf;
        this.stored++;
        return;
      }
      const childLength = this.nodes[NODE_INTS * child + META]! & LENGTH_MASK;
      const common = Math.min(this.commonPrefix(key, offset, child), length, childLength);
      if (common === childLength) {
        parent = child; // the child's prefix is a prefix of the new one: descend
        continue;
      }
      if (common === length) {
        // The new prefix covers the child: it takes the child's place, the child's subtree goes.
        this.stored -= this.countTerminalsBelow(child);
        const leaf = this.newNode(key, offset, length, true);
        this.nodes[slot] = leaf;
        this.stored++;
        return;
      }
      // The two diverge below both lengths: a branch node at the common prefix holds both.
      const leaf = this.newNode(key, offset, length, true);
      const branch = this.newNode(key, offset, common, false);
      this.nodes[NODE_INTS * branch + bitAt(key, offset, common)] = leaf;
      this.nodes[NODE_INTS * branch + bitAt(this.keys, WORDS * child, common)] = child;
      this.nodes[slot] = branch;
      this.stored++;
      return;
    }
  }

  /** Whether `ip` (IPv4, IPv6 or IPv4-mapped IPv6 text) lies in a stored prefix. False for non-addresses. */
  has(ip: string): boolean {
    if (parseIpInto(ip, scratchKey) === 0) return false;
    return this.hasKey(scratchKey);
  }

  /** `has` for an address already parsed into four words (at `offset` of `key`). */
  hasKey(key: Uint32Array, offset = 0): boolean {
    // Hand-written hot path: follow one bit per node without comparing keys on the way; the single
    // terminal on the path is a leaf, and one full compare there decides (a mismatch higher up is
    // also a mismatch in the leaf, whose key extends every node above it).
    const nodes = this.nodes;
    let node = 0;
    if (key[offset] === 0 && key[offset + 1] === 0 && key[offset + 2] === 0xffff && this.nodeCount > IPV4_START_MIN_NODES) {
      node = (this.ipv4Start ?? this.buildIpv4Start())[key[offset + 3]! >>> 16]!;
    }
    for (;;) {
      const meta = nodes[NODE_INTS * node + META]!;
      if (meta >= TERMINAL) return this.matches(key, offset, node, meta - TERMINAL);
      node = nodes[NODE_INTS * node + ((key[offset + (meta >>> 5)]! >>> (31 - (meta & 31))) & 1)]!;
      if (node === NONE) return false;
    }
  }

  /** Builds the IPv4 start table now (it is otherwise built by the first IPv4 lookup after a change). */
  prepare(): void {
    this.ipv4Start ??= this.buildIpv4Start();
  }

  private buildIpv4Start(): Int32Array {
    const table = new Int32Array(65536);
    const nodes = this.nodes;
    for (let high = 0; high < 65536; high++) {
      // Walk as a lookup of ::ffff:high.0.0 would, while the bits consulted are all fixed by `high`.
      let node = 0;
      for (;;) {
        const meta = nodes[NODE_INTS * node + META]!;
        if (meta >= TERMINAL || meta >= 112) break;
        const bit = meta < 96 ? (meta >= 80 ? 1 : 0) : (high >>> (111 - meta)) & 1;
        const child = nodes[NODE_INTS * node + bit]!;
        if (child === NONE) break;
        node = child;
      }
      table[high] = node;
    }
    this.ipv4Start = table;
    return table;
  }

  private matches(key: Uint32Array, keyOffset: number, node: number, length: number): boolean {
    const keys = this.keys;
    const offset = WORDS * node;
    for (let w = 0; w < WORDS; w++) {
      const bits = length - 32 * w;
      if (bits <= 0) return true;
      const diff = (key[keyOffset + w]! ^ keys[offset + w]!) >>> 0;
      if (bits >= 32 ? diff !== 0 : diff >>> (32 - bits) !== 0) return false;
    }
    return true;
  }

  private commonPrefix(key: Uint32Array, keyOffset: number, node: number): number {
    const offset = WORDS * node;
    for (let w = 0; w < WORDS; w++) {
      const diff = (key[keyOffset + w]! ^ this.keys[offset + w]!) >>> 0;
      if (diff !== 0) return 32 * w + Math.clz32(diff);
    }
    return 128;
  }

  private countTerminalsBelow(node: number): number {
    let count = 0;
    const stack = [node];
    while (stack.length > 0) {
      const current = stack.pop()!;
      if (this.nodes[NODE_INTS * current + META]! >= TERMINAL) count++;
      for (let bit = 0; bit < 2; bit++) {
        const child = this.nodes[NODE_INTS * current + bit]!;
        if (child !== NONE) stack.push(child);
      }
    }
    return count;
  }

  private setChildren(node: number, zero: number, one: number): void {
    this.nodes[NODE_INTS * node] = zero;
    this.nodes[NODE_INTS * node + 1] = one;
  }

  private newNode(key: Uint32Array, keyOffset: number, length: number, isTerminal: boolean): number {
    if (this.nodeCount === this.capacity) this.grow(this.capacity * 2);
    const node = this.nodeCount++;
    this.setChildren(node, NONE, NONE);
    this.nodes[NODE_INTS * node + META] = isTerminal ? length + TERMINAL : length;
    const offset = WORDS * node;
    for (let w = 0; w < WORDS; w++) {
      const bits = length - 32 * w;
      const word = key[keyOffset + w]!;
      this.keys[offset + w] = bits >= 32 ? word : bits <= 0 ? 0 : (word & ~(0xffffffff >>> bits)) >>> 0;
    }
    return node;
  }

  private grow(capacity: number): void {
    const nodes = new Int32Array(capacity * NODE_INTS);
    nodes.set(this.nodes);
    const keys = new Uint32Array(capacity * WORDS);
    keys.set(this.keys);
    this.nodes = nodes;
    this.keys = keys;
    this.capacity = capacity;
  }
}
