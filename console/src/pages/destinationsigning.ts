// How a destination signs: its Standard Webhooks scheme (v1 HMAC, v1a
// ed25519, or both) with the public key receivers verify v1a with, and a
// partner's legacy signature header. The ed25519 secret key and the legacy
// secret are never sent by the API: only their fingerprints show. An
// admin may change the scheme, give the ed25519 key (else a key pair is
// generated when v1a needs one), and set or remove the legacy signature.
import type { Destination } from "../../../sdk/typescript/src/gen/rivora/v1/admin_pb.js";
import { admin, problemText, when } from "../api.js";
import { action, disable } from "../busy.js";
import { field, h, replace, status, submitForm } from "../dom.js";

/** The section: draw shows the destination's signing; refresh reloads the page's data after a change. */
export function signingSection(id: string, isAdmin: boolean, refresh: () => void): { el: HTMLElement; draw: (d: Destination | undefined) => void } {
  const summary = h("dl", { class: "auth-summary", "data-testid": "signing" });
  const el = h("section", {}, h("h2", {}, "Signatures"), summary);
  const admin = isAdmin ? schemeForm(id, refresh) : undefined;
  if (admin) el.appendChild(admin.el);
  const draw = (d: Destination | undefined): void => {
    if (!d) return;
    admin?.update(d);
    const scheme = d.signatureScheme || "v1";
    const rows: [string, string][] = [["Scheme", scheme]];
    if (scheme !== "v1a") rows.push(["Secret (v1)", `${d.secretFingerprint} (fingerprint)`]);
    if (scheme !== "v1" && d.publicKey) {
      rows.push(["Public key (v1a)", d.publicKey], ["Signing key", `${d.signingKeyFingerprint} (fingerprint; the secret key is never shown)`]);
      if (d.previousPublicKey) rows.push(["Previous public key", `${d.previousPublicKey}, signs too until ${when(d.previousSigningKeyExpiresAt)}`]);
    }
    const l = d.legacySignature;
    if (l) {
      rows.push(["Legacy signature", `${l.header}: ${l.prefix}${l.encoding} of ${l.algorithm}(${l.template}), secret ${l.secretFingerprint}${l.replaceStandard ? "; instead of webhook-signature" : ""}`]);
    }
    replace(summary, ...rows.flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
  };
  return { el, draw };
}

// The admin's forms: inputs live outside the polled summary, so typing
// survives a refresh. Secret inputs are cleared once the API took them;
// answers carry only fingerprints and the public key.
function schemeForm(id: string, refresh: () => void): { el: HTMLElement; update: (d: Destination) => void } {
  const st = status("action");
  const run = action(st, problemText, refresh);

  const scheme = h("select", { name: "signature-scheme" }, h("option", { value: "v1" }, "v1 (HMAC-SHA256)"), h("option", { value: "v1a" }, "v1a (ed25519)"), h("option", { value: "both" }, "both"));
  const signingKey = h("input", { type: "password", name: "signing-key", placeholder: "empty: a key pair is generated when v1a needs one", autocomplete: "off" });
  const set = h("button", { type: "submit" }, "Set scheme");
  const setScheme = (): void => {
    void run(set, "Setting…", "Set scheme", async () => {
      const key = signingKey.value.trim();
      if (key && !key.startsWith("whsk_")) throw new Error('the signing key must start with "whsk_" (base64 of the 64-byte ed25519 key or its 32-byte seed); leave it empty to have a key pair generated');
      await admin.updateDestination({ id, signatureScheme: scheme.value, signingKey: key || undefined });
      signingKey.value = "";
      return `Signature scheme of ${id} set to ${scheme.value}${key ? " with the given signing key" : ""}.`;
    });
  };

  const header = h("input", { type: "text", name: "legacy-signature-header", placeholder: "X-Signature" });
  const template = h("input", { type: "text", name: "legacy-signature-template", placeholder: "{body} (also {id}, {timestamp} and literal text)" });
  const algorithm = h("select", { name: "legacy-signature-algorithm" }, h("option", { value: "hmac-sha256" }, "hmac-sha256"), h("option", { value: "hmac-sha512" }, "hmac-sha512"), h("option", { value: "hmac-sha1" }, "hmac-sha1"));
  const encoding = h("select", { name: "legacy-signature-encoding" }, h("option", { value: "hex" }, "hex"), h("option", { value: "base64" }, "base64"));
  const prefix = h("input", { type: "text", name: "legacy-signature-prefix", placeholder: "sha256= (optional literal text)" });
  const secret = h("input", { type: "password", name: "legacy-signature-secret", autocomplete: "off" });
  const only = h("input", { type: "checkbox", name: "legacy-signature-only" });
  const setLegacy = h("button", { type: "submit" }, "Set legacy signature");
  const removeLegacy = h("button", { type: "button", disabled: true }, "Remove legacy signature");
  const setLegacySignature = (): void => {
    void run(setLegacy, "Setting…", "Set legacy signature", async () => {
      if (!header.value.trim() || !secret.value) throw new Error("a legacy signature needs the header name and the partner's secret");
      await admin.updateDestination({
        id,
        legacySignature: {
          header: header.value.trim(),
          template: template.value,
          algorithm: algorithm.value,
          encoding: encoding.value,
          prefix: prefix.value,
          secret: secret.value,
          replaceStandard: only.checked,
        },
      });
      secret.value = "";
      return `Legacy signature of ${id} set.`;
    });
  };
  removeLegacy.addEventListener("click", () => void run(removeLegacy, "Removing…", "Remove legacy signature", async () => (await admin.updateDestination({ id, removeLegacySignature: true }), `Legacy signature of ${id} removed.`)));

  const el = h(
    "div",
    { class: "actions" },
    // Enter in a field sets what its form sets; Remove is never the default.
    submitForm({}, setScheme, h("fieldset", {}, h("legend", {}, "Standard Webhooks signature"), field("Signature scheme", scheme), field("Signing key (v1a)", signingKey), set)),
    submitForm(
      {},
      setLegacySignature,
      h(
        "fieldset",
        {},
        h("legend", {}, "Legacy signature (a partner's existing contract)"),
        field("Header", header),
        field("Template", template),
        field("Algorithm", algorithm),
        field("Encoding", encoding),
        field("Prefix", prefix),
        field("Partner's secret", secret),
        field("Instead of webhook-signature", only),
        setLegacy,
        removeLegacy,
      ),
    ),
    st.el,
  );
  // Remove is offered when there is a legacy signature; once removed, the keyboard goes to Set.
  const update = (d: Destination): void => {
    if (d.legacySignature) removeLegacy.disabled = false;
    else disable(removeLegacy, setLegacy);
  };
  return { el, update };
}
