// Audit: every configuration change, newest first, with who made it.
import { admin, errorText, when } from "../api.js";
import { field, h, replace, status, submitForm, table } from "../dom.js";
import type { Page } from "../main.js";
import { poll } from "../poll.js";

export const auditPage: Page = (main) => {
  const st = status();
  const dest = h("input", { type: "text", name: "destination" });
  dest.addEventListener("change", () => p.now());
  const body = h("div", { "data-testid": "audit" });
  // Enter in the filter shows its changes at once, as leaving the field does.
  replace(main, h("h1", {}, "Audit"), submitForm({ class: "filters" }, () => p.now(), field("Destination", dest), h("button", { type: "submit" }, "Show")), st.el, body);
  const p = poll(async () => {
    try {
      const r = await admin.listAudit({ limit: 200, destinationId: dest.value.trim() });
      replace(
        body,
        table(`Last ${r.entries.length} changes, newest first`, [
          { label: "At", cell: (e) => when(e.at) },
          { label: "Author", cell: (e) => e.author },
          { label: "Action", cell: (e) => e.action },
          { label: "Destination", cell: (e) => e.destinationId },
          { label: "Reason", cell: (e) => e.reason },
          { label: "Detail", cell: (e) => e.detail },
          { label: "Version", cell: (e) => String(e.version), className: "num" },
        ], [...r.entries].reverse(), undefined, "No change yet."),
      );
      st.clear();
    } catch (err) {
      st.error(`Could not load the audit log: ${errorText(err)}`);
    }
  });
  return () => p.stop();
};
