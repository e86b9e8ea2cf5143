// Tokens (admins only): the API tokens every call is made with. A new
// token is shown once, here, as `rivoractl tokens create` prints it once;
// the control plane keeps only its hash.
import type { ApiToken } from "../../../sdk/typescript/src/gen/rivora/v1/tokens_pb.js";
import { Role } from "../../../sdk/typescript/src/gen/rivora/v1/tokens_pb.js";
import { date, duration, errorText, tokens, when } from "../api.js";
import { busy, drawnBusy, isBusy } from "../busy.js";
import { field, h, replace, status, table } from "../dom.js";
import { loadLine } from "../loadline.js";
import { counted, customerList, parseDuration, roleName } from "../format.js";
import type { Page } from "../main.js";
import { poll } from "../poll.js";

const roles: [Role, string][] = [
  [Role.VIEWER, "viewer: every read, nothing else"],
  [Role.OPERATOR, "operator: steering and every read"],
  [Role.ADMIN, "admin: everything, tokens and destinations included"],
  [Role.PUBLISHER, "publisher: publish for its customers"],
  [Role.CUSTOMER, "customer: the portal, for its customers"],
];

export const tokensPage: Page = (main, me) => {
  const load = loadLine("tokens");
  const ast = status("action"); // what a revoke did
  const list = h("div", { "data-testid": "tokens" });
  replace(main, h("h1", {}, "Tokens"), h("p", {}, "Each call carries one of these. Rivora keeps a token's hash, never the token: a new one is shown once, when it is created."), load.el, list, ast.el, createForm());

  function draw(ts: ApiToken[]): void {
    replace(
      list,
      table(counted(ts.length, "token"), [
        { label: "Id", cell: (t) => t.id },
        { label: "Name", cell: (t) => (t.id === me.id ? `${t.name} (this session's)` : t.name) },
        { label: "Role", cell: (t) => roleName(t.role) },
        { label: "Customers", cell: (t) => t.customers.join(", ") || "—" },
        { label: "Created", cell: (t) => when(t.createdAt) },
        { label: "Created by", cell: (t) => t.createdBy || "bootstrap" },
        { label: "Expires", cell: (t) => (expired(t) ? `expired ${when(t.expiresAt)}` : when(t.expiresAt) || "never") },
        { label: "Action", cell: (t) => (expired(t) ? "—" : revokeButton(t)) },
      ], ts, (t) => ({ "data-token": t.id }), "No token."),
    );
  }

  function revokeButton(t: ApiToken): HTMLElement {
    const b = h("button", { type: "button", class: "danger", "aria-label": `Revoke token ${t.id} (${t.name})` }, "Revoke");
    // The row is drawn anew by each refresh: the call is keyed by the token.
    const key = `revoke token ${t.id}`;
    b.addEventListener("click", () => {
      if (isBusy(key)) return;
      const self = t.id === me.id ? " It is the token this console signed in with: you will be signed out." : "";
      if (!window.confirm(`Revoke ${t.id} (${t.name})? Every agent refuses it within a second.${self}`)) return;
      void busy(
        b,
        "Revoking…",
        async () => {
          try {
            await tokens.revokeToken({ id: t.id });
            ast.ok(`Revoked ${t.id} (${t.name}).`);
            p.now();
          } catch (err) {
            ast.error(`Revoke failed: ${errorText(err)}`);
          }
        },
        key,
      );
    });
    return drawnBusy(b, key);
  }

  function createForm(): HTMLElement {
    const name = h("input", { type: "text", name: "token-name", maxlength: "100" });
    const role = h("select", { name: "token-role" }, ...roles.map(([r, label]) => h("option", { value: String(r) }, label)));
    const customers = h("input", { type: "text", name: "token-customers", placeholder: "acme, globex (publisher: * for any)" });
    const ttl = h("input", { type: "text", name: "token-ttl", placeholder: "90d (empty: never expires)" });
    const btn = h("button", { type: "submit" }, "Create token");
    const cst = status("action");
    const secret = h("div", { "data-testid": "new-token" });
    const form = h("form", {}, h("fieldset", {}, h("legend", {}, "Create a token"), field("Name", name), field("Role", role), field("Customers", customers), field("Expires after", ttl), btn), cst.el, secret);
    form.addEventListener("submit", (e) => {
      e.preventDefault();
      if (isBusy(btn)) return;
      const t = parseDuration(ttl.value);
      if (!name.value.trim()) return cst.error("A token needs a name, for people and the audit log.");
      if (ttl.value.trim() && t === undefined) return cst.error(`Expires after "${ttl.value}": use e.g. 720h, 90d`);
      void busy(btn, "Creating…", async () => {
        try {
          const r = await tokens.createToken({
            name: name.value.trim(),
            role: Number(role.value) as Role,
            customers: customerList(customers.value),
            ttl: t === undefined ? undefined : duration(t),
          });
          // Labelled: a screen reader named it nothing ("edit text").
          const shown = h("input", { type: "text", readonly: true, value: r.token, name: "new-token", size: 60 });
          replace(
            secret,
            h("p", { class: "status ok", role: "status" }, `Created ${r.tokenInfo?.id ?? ""} (${r.tokenInfo?.name ?? ""}, ${roleName(r.tokenInfo?.role ?? 0)}). Copy the token now: it is not shown again.`),
            field(`New token ${r.tokenInfo?.name ?? ""} (shown once)`, shown),
          );
          shown.select();
          name.value = customers.value = ttl.value = "";
          cst.clear();
          p.now();
        } catch (err) {
          replace(secret);
          cst.error(`Create failed: ${errorText(err)}`);
        }
      });
    });
    return form;
  }

  const p = poll(async () => {
    try {
      draw((await tokens.listTokens({})).tokens);
      load.ok();
    } catch (err) {
      load.failed(err);
    }
  });
  return () => p.stop();
};

/** An expired token opens nothing: it is shown so, with nothing to revoke. */
function expired(t: ApiToken): boolean {
  const at = date(t.expiresAt);
  return at !== undefined && at.getTime() <= Date.now();
}
