// Pure rules the subscription pages share: reading what a person typed
// (types, headers), matching types as the server does, choosing a test
// event's type. No DOM, no network, so vitest checks them exactly.

/**
 * parseTypes reads "order.*, invoice.paid" into the list the API takes:
 * types are comma-separated (as rivoractl's --types), without blanks or
 * repeats, in typed order. A type has no spaces (the server refuses
 * them), so a space inside one is a mistake, not a separator: "order
 * created" was read as the two types "order" and "created", which the
 * subscription then matched silently. It throws an Error saying so.
 */
export function parseTypes(text: string): string[] {
  const types = commaList(text);
  for (const t of types) {
    if (/\s/.test(t)) {
      throw new Error(`event type "${t}" has a space: separate types with commas (order.created, invoice.paid); a type itself has none`);
    }
  }
  return types;
}

/** commaList reads "a, b,,c" into ["a", "b", "c"]: trimmed, without blanks or repeats, in typed order. */
export function commaList(text: string): string[] {
  const seen = new Set<string>();
  for (const t of text.split(",")) if (t.trim() !== "") seen.add(t.trim());
  return [...seen];
}

/**
 * typeMatches says whether an event type matches one pattern of a
 * subscription: an exact name, or a glob where "*" matches any run of
 * characters ("order.*", "*"), as the server's routing.TypeMatches does.
 */
export function typeMatches(pattern: string, type: string): boolean {
  if (!pattern.includes("*")) return pattern === type;
  const parts = pattern.split("*");
  const first = parts[0]!;
  const last = parts[parts.length - 1]!;
  if (!type.startsWith(first)) return false;
  let at = first.length;
  for (const mid of parts.slice(1, -1)) {
    const i = type.indexOf(mid, at);
    if (i < 0) return false;
    at = i + mid.length;
  }
  return type.length - last.length >= at && type.endsWith(last);
}

/** isExact: a type name, not a glob. */
export function isExact(pattern: string): boolean {
  return !pattern.includes("*");
}

/** A catalogue entry as the test-event chooser needs it. */
export interface CatalogueType {
  name: string;
  deprecated: boolean;
}

/**
 * testEventTypes lists the types a test event to a subscription may carry,
 * best first: the subscription's exact types, then the catalogue's
 * (not deprecated) types its patterns match, then the rest of the
 * catalogue. When the cell is strict, a type outside the catalogue would be
 * refused, so the subscription's exact types are offered only if
 * catalogued.
 */
export function testEventTypes(patterns: string[], catalogue: CatalogueType[], strict: boolean): string[] {
  const offered = catalogue.filter((t) => !t.deprecated).map((t) => t.name);
  const known = new Set(catalogue.map((t) => t.name));
  const out = new Set<string>();
  for (const p of patterns) if (isExact(p) && (!strict || known.has(p))) out.add(p);
  for (const name of offered) if (patterns.some((p) => typeMatches(p, name))) out.add(name);
  for (const name of offered) out.add(name);
  return [...out];
}

/** A custom header as the API takes it. */
export interface HeaderInput {
  name: string;
  value: string;
}

/**
 * parseHeaders reads one "Name: value" per line (blank lines ignored), as
 * `rivoractl subscriptions create --header` takes them. It throws an Error
 * naming the line that has no colon or no name; the server checks the
 * rest (reserved names, lengths).
 */
export function parseHeaders(text: string): HeaderInput[] {
  const out: HeaderInput[] = [];
  text.split("\n").forEach((raw, i) => {
    const line = raw.trim();
    if (line === "") return;
    const colon = line.indexOf(":");
    const name = colon < 0 ? "" : line.slice(0, colon).trim();
    if (name === "") throw new Error(`header line ${i + 1} "${line}": write it as Name: value`);
    out.push({ name, value: line.slice(colon + 1).trim() });
  });
  return out;
}

/**
 * parseJSONData reads a test event's data: it must be JSON (an object, an
 * array or a value), since the event is sent as application/json. It
 * throws an Error saying what is wrong.
 */
export function parseJSONData(text: string): unknown {
  const t = text.trim();
  if (t === "") return {};
  try {
    return JSON.parse(t) as unknown;
  } catch (err) {
    throw new Error(`the data is not JSON: ${err instanceof Error ? err.message : String(err)}`);
  }
}
