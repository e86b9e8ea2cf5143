// How a destination authenticates Rivora to its partner beyond the
// signature: its mTLS client certificate (and the previous one during a
// rotation's overlap), the pinned server CA, OAuth2 client credentials.
// Everyone who may read the destination sees the summary (the private key
// and the client secret only as fingerprints: the API never sends them);
// an admin may set or remove them.
import type { Certificate, Destination, DestinationHealth } from "../../../sdk/typescript/src/gen/rivora/v1/admin_pb.js";
import { admin, duration, problemText, when } from "../api.js";
import { action, disable } from "../busy.js";
import { field, h, replace, status, submitForm } from "../dom.js";
import { parseDuration } from "../format.js";

function certText(c: Certificate): string {
  return `subject ${c.subject}, issuer ${c.issuer}, not after ${when(c.notAfter)}, ${c.fingerprint}`;
}

/** The section: draw shows the destination's settings; refresh reloads the page's data after a change. */
export function endpointAuthSection(id: string, isAdmin: boolean, refresh: () => void): { el: HTMLElement; draw: (d: Destination | undefined, hh: DestinationHealth | undefined) => void } {
  const summary = h("dl", { class: "auth-summary", "data-testid": "endpoint-auth" });
  const el = h("section", {}, h("h2", {}, "Partner authentication"), summary);
  const admin = isAdmin ? form(id, refresh) : undefined;
  if (admin) el.appendChild(admin.el);
  const draw = (d: Destination | undefined, hh: DestinationHealth | undefined): void => {
    if (d) admin?.update(d);
    const rows: [string, string][] = [];
    if (d?.clientCertificate) {
      const c = d.clientCertificate;
      rows.push(["Client certificate", certText(c)], ["Client key", `${c.keyFingerprint} (fingerprint; the key is never shown)`]);
      if (hh?.clientCertificateExpiring) rows.push(["Expiry", `EXPIRING at ${when(c.notAfter)}: set a new certificate`]);
    }
    if (d?.previousClientCertificate) rows.push(["Previous certificate", `${certText(d.previousClientCertificate)}; handshake fallback until ${when(d.previousClientCertificate.overlapUntil)}`]);
    if (d?.serverCa) rows.push(["Pinned server CA", certText(d.serverCa)]);
    if (d?.oauth2) {
      const o = d.oauth2;
      rows.push(["OAuth2 token URL", o.tokenUrl], ["OAuth2 client id", o.clientId], ["OAuth2 client secret", `${o.clientSecretFingerprint} (fingerprint; the secret is never shown)`]);
      if (o.scopes.length) rows.push(["OAuth2 scopes", o.scopes.join(" ")]);
      if (o.audience) rows.push(["OAuth2 audience", o.audience]);
    }
    if (rows.length === 0) {
      replace(summary, h("dt", {}, "None"), h("dd", {}, "Signature only: no client certificate, pinned CA or OAuth2."));
      return;
    }
    replace(summary, ...rows.flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
  };
  return { el, draw };
}

// The admin's form: inputs live outside the polled summary, so typing
// survives a refresh. update offers Remove only for what is set.
function form(id: string, refresh: () => void): { el: HTMLElement; update: (d: Destination) => void } {
  const st = status("action");
  const run = action(st, problemText, refresh);
  const cert = h("textarea", { name: "client-cert", rows: 4, placeholder: "-----BEGIN CERTIFICATE-----" });
  const key = h("textarea", { name: "client-key", rows: 4, placeholder: "-----BEGIN PRIVATE KEY-----", autocomplete: "off" });
  const overlap = h("input", { type: "text", name: "client-cert-overlap", placeholder: "24h (0: none)" });
  const setCert = h("button", { type: "submit" }, "Set certificate");
  const removeCert = h("button", { type: "button", disabled: true }, "Remove certificate");
  const setCertificate = (): void => {
    void run(setCert, "Setting…", "Set certificate", async () => {
      if (!cert.value.includes("-----BEGIN") || !key.value.includes("-----BEGIN")) throw new Error("paste the certificate and its private key, both PEM");
      const o = overlap.value.trim() ? parseDuration(overlap.value) : undefined;
      if (overlap.value.trim() && o === undefined) throw new Error(`overlap "${overlap.value}": use e.g. 0s, 30m, 24h`);
      await admin.updateDestination({ id, clientCertificate: { certificatePem: cert.value, keyPem: key.value }, clientCertificateOverlap: o === undefined ? undefined : duration(o) });
      key.value = "";
      return `Client certificate of ${id} set.`;
    });
  };
  removeCert.addEventListener("click", () => void run(removeCert, "Removing…", "Remove certificate", async () => (await admin.updateDestination({ id, removeClientCertificate: true }), `Client certificate of ${id} removed.`)));

  const tokenUrl = h("input", { type: "url", name: "oauth2-token-url", placeholder: "https://auth.partner.example/token" });
  const clientId = h("input", { type: "text", name: "oauth2-client-id" });
  const clientSecret = h("input", { type: "password", name: "oauth2-client-secret", autocomplete: "off" });
  const scopes = h("input", { type: "text", name: "oauth2-scopes", placeholder: "space-separated" });
  const audience = h("input", { type: "text", name: "oauth2-audience" });
  const setOAuth2 = h("button", { type: "submit" }, "Set OAuth2");
  const removeOAuth2 = h("button", { type: "button", disabled: true }, "Remove OAuth2");
  const setCredentials = (): void => {
    void run(setOAuth2, "Setting…", "Set OAuth2", async () => {
      await admin.updateDestination({
        id,
        oauth2: { tokenUrl: tokenUrl.value.trim(), clientId: clientId.value.trim(), clientSecret: clientSecret.value, scopes: scopes.value.split(/\s+/).filter(Boolean), audience: audience.value.trim() },
      });
      clientSecret.value = "";
      return `OAuth2 credentials of ${id} set.`;
    });
  };
  removeOAuth2.addEventListener("click", () => void run(removeOAuth2, "Removing…", "Remove OAuth2", async () => (await admin.updateDestination({ id, removeOauth2: true }), `OAuth2 credentials of ${id} removed.`)));

  const el = h(
    "div",
    { class: "actions" },
    // Enter in a field sets what its form sets; Remove is never the default.
    submitForm({}, setCertificate, h("fieldset", {}, h("legend", {}, "Client certificate (mTLS)"), field("Certificate (PEM)", cert), field("Private key (PEM)", key), field("Overlap", overlap), setCert, removeCert)),
    submitForm({}, setCredentials, h("fieldset", {}, h("legend", {}, "OAuth2 client credentials"), field("Token URL", tokenUrl), field("Client id", clientId), field("Client secret", clientSecret), field("Scopes", scopes), field("Audience", audience), setOAuth2, removeOAuth2)),
    st.el,
  );
  // Remove is offered for what is set; once removed, the keyboard goes to its Set.
  const update = (d: Destination): void => {
    if (d.clientCertificate) removeCert.disabled = false;
    else disable(removeCert, setCert);
    if (d.oauth2) removeOAuth2.disabled = false;
    else disable(removeOAuth2, setOAuth2);
  };
  return { el, update };
}
