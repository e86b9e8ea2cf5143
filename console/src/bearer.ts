// The signed-in token on every call, and word of the server refusing it.
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";

/**
 * bearerAuth sends token() as a bearer token on every call. When the
 * server refuses that token as unauthenticated (revoked, expired) and it
 * is still the session's, refused is told why. A streaming call (a
 * replay) is refused while its messages are read, not when it starts:
 * that is watched too.
 */
export function bearerAuth(token: () => string | null, refused: (why: string) => void): Interceptor {
  return (next) => async (req) => {
    const t = token();
    if (t) req.header.set("Authorization", `Bearer ${t}`);
    const check = (err: unknown): void => {
      const e = ConnectError.from(err);
      if (t && t === token() && e.code === Code.Unauthenticated) refused(e.rawMessage);
    };
    try {
      const res = await next(req);
      return res.stream ? { ...res, message: watched(res.message, check) } : res;
    } catch (err) {
      check(err);
      throw err;
    }
  };
}

/** watched passes messages through, telling onError of the error that ends them. */
async function* watched<T>(messages: AsyncIterable<T>, onError: (err: unknown) => void): AsyncIterable<T> {
  try {
    yield* messages;
  } catch (err) {
    onError(err);
    throw err;
  }
}
