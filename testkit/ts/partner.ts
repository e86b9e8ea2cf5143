// The one partner endpoint of the TypeScript tests: a real HTTP server on
// 127.0.0.1 that records every request and answers a status the test can
// change, or as the test's answer function says (for a fake Connect
// server, say).
import { once } from "node:events";
import http from "node:http";
import type net from "node:net";

/** Received is one request a partner got. */
export interface Received {
  method: string;
  /** The request path, e.g. /hook. */
  url: string;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
  /** body as UTF-8. */
  text: string;
  /** webhook-id */
  id: string;
  /** rivora-lane */
  lane: string;
  /** rivora-replay present */
  replay: boolean;
  /** The status answered. */
  status: number;
}

/** Answer writes the response to one request. */
export type Answer = (req: Received, res: http.ServerResponse) => void;

/** Partner is a started partner; close it when done. */
export interface Partner {
  /** The webhook address, base + "/hook". */
  url: string;
  /** http://127.0.0.1:PORT */
  base: string;
  /** What the default answer answers (changeable); 200 unless given. */
  status: number;
  received: Received[];
  close(): Promise<void>;
}

/** Options of startPartner. */
export interface PartnerOptions {
  /** The status of the default answer (200). */
  status?: number;
  /** Answers instead of the default (status, text/plain "ok" or "unavailable"). */
  answer?: Answer;
}

/** startPartner starts a partner on 127.0.0.1. */
export async function startPartner(opts: PartnerOptions = {}): Promise<Partner> {
  const p: Partner = { url: "", base: "", status: opts.status ?? 200, received: [], close: async () => {} };
  const answer: Answer =
    opts.answer ??
    ((_, res) => {
      res.writeHead(p.status, { "Content-Type": "text/plain" });
      res.end(p.status < 300 ? "ok" : "unavailable");
    });
  const srv = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const body = Buffer.concat(chunks);
      const r: Received = {
        method: req.method ?? "",
        url: req.url ?? "",
        headers: req.headers,
        body,
        text: body.toString(),
        id: String(req.headers["webhook-id"] ?? ""),
        lane: String(req.headers["rivora-lane"] ?? ""),
        replay: req.headers["rivora-replay"] !== undefined,
        status: 0,
      };
      p.received.push(r);
      answer(r, res);
      r.status = res.statusCode;
    });
  });
  srv.listen(0, "127.0.0.1");
  await once(srv, "listening");
  p.base = `http://127.0.0.1:${(srv.address() as net.AddressInfo).port}`;
  p.url = `${p.base}/hook`;
  p.close = async () => {
    srv.closeAllConnections();
    srv.close();
    await once(srv, "close");
  };
  return p;
}
