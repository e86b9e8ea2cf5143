// How a destination signs: its Standard Webhooks scheme (v1 HMAC, v1a
// ed25519, or both) with the public key receivers verify v1a with, and a
// partner's legacy signature header. The ed25519 secret key and the legacy
// secret are never sent by the API: only their fingerprints show. An
// admin may change the scheme (a key pair is generated when v1a needs one).
import type { Destination } from "../../../sdk/typescript/src/gen/rivora/v1/admin_pb.js";
import { admin, errorText, when } from "../api.js";
import { field, h, replace, status } from "../dom.js";

/** The section: draw shows the destination's signing; refresh reloads the page's data after a change. */
export function signingSection(id: string, isAdmin: boolean, refresh: () => void): { el: HTMLElement; draw: (d: Destination | undefined) => void } {
  const summary = h("dl", { class: "auth-summary", "data-testid": "signing" });
  const el = h("section", {}, h("h2", {}, "Signatures"), summary);
  if (isAdmin) el.appendChild(schemeForm(id, refresh));
  const draw = (d: Destination | undefined): void => {
    if (!d) return;
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

function schemeForm(id: string, refresh: () => void): HTMLElement {
  const st = status();
  const scheme = h("select", { name: "signature-scheme" }, h("option", { value: "v1" }, "v1 (HMAC-SHA256)"), h("option", { value: "v1a" }, "v1a (ed25519)"), h("option", { value: "both" }, "both"));
  const set = h("button", { type: "button" }, "Set scheme");
  set.addEventListener("click", () => {
    void (async () => {
      try {
        await admin.updateDestination({ id, signatureScheme: scheme.value });
        st.ok(`Signature scheme of ${id} set to ${scheme.value}.`);
        refresh();
      } catch (err) {
        st.error(`Set scheme failed: ${errorText(err)}`);
      }
    })();
  });
  return h("div", { class: "actions" }, field("Signature scheme", scheme), set, st.el);
}
