// The console's hash routes: #/<page>/<arg>/… with each part
// percent-decoded.

/** A route: the page's name and its arguments. */
export interface Route {
  name: string;
  args: string[];
}

/**
 * parseRoute reads location.hash; an empty hash is the Destinations page.
 * It answers undefined for a hash that is not an address (a malformed
 * %-escape, on which decodeURIComponent throws URIError), so the shell
 * draws a "bad address" page instead of throwing out of hashchange.
 */
export function parseRoute(hash: string): Route | undefined {
  const parts = hash.replace(/^#\/?/, "").split("/");
  const decoded: string[] = [];
  for (const p of parts) {
    try {
      decoded.push(decodeURIComponent(p));
    } catch (err) {
      if (err instanceof URIError) return undefined;
      throw err;
    }
  }
  const [name = "destinations", ...args] = decoded;
  return { name, args };
}
