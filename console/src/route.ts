// The console's hash routes: #/<page>/<arg>/… with each part
// percent-decoded.

/** A route: the page's name and its arguments. */
export interface Route {
  name: string;
  args: string[];
}

/** parseRoute reads location.hash; an empty hash is the Destinations page. */
export function parseRoute(hash: string): Route {
  const [name = "destinations", ...args] = hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  return { name, args };
}
