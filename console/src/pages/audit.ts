// Audit: every configuration change, newest first, with who made it.
import { admin, when } from "../api.js";
import { field, h, replace, submitForm, table } from "../dom.js";
import { loadLine } from "../loadline.js";
import type { Page } from "../main.js";
import { poll } from "../poll.js";

export const auditPage: Page = (main) => {
  const load = loadLine("the audit log");
  const dest = h("input", { type: "text", name: "destination" });
  dest.addEventListener("change", () => p.now());
  const body = h("div", { "data-testid": "audit" });
  // Enter in the filter shows its changes at once, as leaving the field does.
  replace(main, h("h1", {}, "Audit"), submitForm({ class: "filters" }, () => p.now(), field("Destination", dest), h("button", { type: "submit" }, "Show")), load.el, body);
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
      load.ok();
    } catch (err) {
      load.failed(err);
    }
  });
  return () => p.stop();
};
