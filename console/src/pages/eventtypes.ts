// Event types: the catalogue customers subscribe from. Every operator
// role reads it; an admin adds types (with an optional JSON Schema every
// event's data must satisfy) and deprecates them.
import type { EventType } from "../../../sdk/typescript/src/gen/rivora/v1/subscriptions_pb.js";
import { errorText, eventTypes, when } from "../api.js";
import { busy, drawnBusy, isBusy } from "../busy.js";
import { field, h, replace, status, table } from "../dom.js";
import { loadLine } from "../loadline.js";
import { can, counted } from "../format.js";
import type { Page } from "../main.js";
import { poll } from "../poll.js";

export const eventTypesPage: Page = (main, me) => {
  const load = loadLine("the event-type catalogue");
  const ast = status("action"); // what an action did
  const mode = h("p", { "data-testid": "catalogue-mode" });
  const list = h("div", { "data-testid": "event-types" });
  replace(main, h("h1", {}, "Event types"), mode, load.el, list, ast.el, can(me.role, "admin") ? createForm() : "");

  function draw(types: EventType[], strict: boolean): void {
    mode.textContent = strict
      ? "Strict catalogue: the cell refuses events whose type is not listed here."
      : "Open catalogue: any type is accepted; these are the ones offered to subscribers.";
    const admin = can(me.role, "admin");
    replace(
      list,
      table(counted(types.length, "event type"), [
        { label: "Type", cell: (t) => t.name },
        { label: "Description", cell: (t) => t.description || "—" },
        { label: "Schema", cell: (t) => (t.schema ? h("details", {}, h("summary", {}, "JSON Schema"), h("pre", {}, t.schema)) : "none") },
        { label: "State", cell: (t) => (t.deprecated ? "deprecated" : "offered") },
        { label: "Updated", cell: (t) => when(t.updatedAt ?? t.createdAt) },
        ...(admin ? [{ label: "", cell: (t: EventType) => deprecateButton(t) }] : []),
      ], types, (t) => ({ "data-type": t.name }), "The catalogue is empty: customers may subscribe to any type (or * for all)."),
    );
  }

  function deprecateButton(t: EventType): HTMLElement {
    const undo = t.deprecated;
    const what = undo ? "Offer again" : "Deprecate";
    const b = h("button", { type: "button", "aria-label": `${what} ${t.name}`, "data-key": "deprecate" }, what);
    // The row is drawn anew by each refresh: the call is keyed by the type.
    const key = `deprecate type ${t.name}`;
    b.addEventListener("click", () => {
      void busy(b, undo ? "Offering…" : "Deprecating…", async () => {
        try {
          await eventTypes.deprecateEventType({ name: t.name, undo });
          ast.ok(undo ? `${t.name} is offered again.` : `${t.name} is deprecated: no longer offered for new subscriptions; existing ones keep it.`);
          p.now();
        } catch (err) {
          ast.error(`${undo ? "Offer again" : "Deprecate"} failed: ${errorText(err)}`);
        }
      }, key);
    });
    return drawnBusy(b, key);
  }

  function createForm(): HTMLElement {
    const name = h("input", { type: "text", name: "type-name", placeholder: "order.created" });
    const description = h("input", { type: "text", name: "type-description" });
    const schema = h("textarea", { name: "type-schema", rows: 6, cols: 60, placeholder: '{"type": "object", "required": ["order_id"]} (optional)' });
    const btn = h("button", { type: "submit" }, "Add type");
    const form = h("form", {}, h("fieldset", {}, h("legend", {}, "Add an event type"), field("Type", name), field("Description", description), field("JSON Schema", schema), btn));
    form.addEventListener("submit", (e) => {
      e.preventDefault();
      if (isBusy(btn)) return;
      if (!name.value.trim()) return ast.error("An event type needs a name, such as order.created.");
      void busy(btn, "Adding…", async () => {
        try {
          const r = await eventTypes.createEventType({ name: name.value.trim(), description: description.value.trim(), schema: schema.value.trim() });
          ast.ok(`Added ${r.eventType?.name ?? name.value.trim()} (config version ${r.version}).`);
          name.value = description.value = schema.value = "";
          p.now();
        } catch (err) {
          ast.error(`Add failed: ${errorText(err)}`);
        }
      });
    });
    return form;
  }

  const p = poll(async () => {
    try {
      const r = await eventTypes.listEventTypes({ includeDeprecated: true });
      draw(r.eventTypes, r.strict);
      load.ok();
    } catch (err) {
      load.failed(err);
    }
  });
  return () => p.stop();
};
