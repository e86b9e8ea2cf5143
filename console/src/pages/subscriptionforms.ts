// The forms that change a subscription: create, edit, rotate its secret,
// send it a test event. Each reports through ok/fail (the page's status
// line) and leaves the page's polling alone, so typing survives a refresh.
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { CreateSubscriptionRequestSchema, Subscription, UpdateSubscriptionRequestSchema } from "../../../sdk/typescript/src/gen/rivora/v1/subscriptions_pb.js";
import { duration, errorText, eventTypes, ingest, problemText, subscriptions } from "../api.js";
import { field, h, replace, submitForm } from "../dom.js";
import { parseDuration } from "../format.js";
import { commaList, parseHeaders, parseJSONData, parseTypes, testEventTypes } from "../subscriptions.js";
import { busy } from "../busy.js";

type Report = (msg: string) => void;

/** A secret shown once, with the warning that it cannot be read again. */
export function secretOnce(what: string, secret: string): HTMLElement {
  return h(
    "div",
    { class: "secret-once", "data-testid": "secret-once" },
    h("p", {}, `${what}: copy it now, it is not shown again.`),
    h("code", { "data-testid": "secret" }, secret),
  );
}

/** Where deliveries go: the destination's URL, a path on its origin, or a full URL on its origin. */
function targetFields(s?: Subscription): { el: HTMLElement; value: () => { path: string; url: string } } {
  const kind = h(
    "select",
    { name: "target" },
    h("option", { value: "" }, "the destination's URL"),
    h("option", { value: "path" }, "a path on its origin"),
    h("option", { value: "url" }, "a URL on its origin"),
  );
  const where = h("input", { type: "text", name: "target-value", placeholder: "/in/c1 or https://partner.example/in/c1" });
  if (s?.path) (kind.value = "path"), (where.value = s.path);
  else if (s?.url) (kind.value = "url"), (where.value = s.url);
  return {
    el: h("span", {}, field("Deliver to", kind), field("Path or URL", where)),
    value: () => ({ path: kind.value === "path" ? where.value.trim() : "", url: kind.value === "url" ? where.value.trim() : "" }),
  };
}

/**
 * createForm makes a subscription for customer; destinations are
 * suggested (the customer may type another it may use), the catalogue's
 * types are offered to pick. Done gets the new subscription.
 */
export function createForm(customer: string, destinations: () => string[], done: (s: Subscription) => void, fail: Report): HTMLElement {
  const dest = h("input", { type: "text", name: "destination", list: "destination-ids", required: true, autocomplete: "off" });
  const destList = h("datalist", { id: "destination-ids" });
  const types = h("input", { type: "text", name: "types", required: true, placeholder: "order.*, invoice.paid (comma-separated)" });
  const createBtn = h("button", { type: "submit" }, "Create subscription");
  const filter = h("input", { type: "text", name: "filter", placeholder: "data.amount > 100 (optional)" });
  const target = targetFields();
  const headers = h("textarea", { name: "headers", rows: 2, placeholder: "X-Example: value (one per line, optional)" });
  const ownSecret = h("input", { type: "checkbox", name: "own-secret" });
  const description = h("input", { type: "text", name: "description" });
  const form = h(
    "form",
    { class: "filters", "data-testid": "create-subscription" },
    field("Destination", dest),
    destList,
    field("Event types", types),
    field("Filter (CEL)", filter),
    target.el,
    field("Headers", headers),
    h("label", { class: "field check" }, ownSecret, h("span", {}, "Sign with a secret of its own")),
    field("Description", description),
    createBtn,
  );
  dest.addEventListener("focus", () => replace(destList, ...destinations().map((d) => h("option", { value: d }))));
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    void busy(createBtn, "Creating…", async () => {
      try {
        const req: MessageInitShape<typeof CreateSubscriptionRequestSchema> = {
          customerId: customer,
          destinationId: dest.value.trim(),
          types: parseTypes(types.value),
          filter: filter.value.trim(),
          ...target.value(),
          headers: parseHeaders(headers.value),
          generateSecret: ownSecret.checked,
          description: description.value.trim(),
        };
        if (req.types!.length === 0) throw new Error("name at least one event type (order.created, order.*, or * for all)");
        const r = await subscriptions.createSubscription(req);
        form.reset();
        done(r.subscription!);
      } catch (err) {
        fail(`Create failed: ${problemText(err)}`);
      }
    });
  });
  return h("section", {}, h("h2", {}, "New subscription"), form);
}

/** editForm changes types, filter, target, headers and description; only what changed is sent. */
export function editForm(s: Subscription, ok: Report, fail: Report): HTMLElement {
  const types = h("input", { type: "text", name: "edit-types", value: s.types.join(", "), placeholder: "comma-separated" });
  const filter = h("input", { type: "text", name: "edit-filter", value: s.filter });
  const target = targetFields(s);
  const setHeaders = h("textarea", { name: "set-headers", rows: 2, placeholder: "Name: value (add or replace)" });
  const removeHeaders = h("input", { type: "text", name: "remove-headers", placeholder: "names, comma separated" });
  const description = h("input", { type: "text", name: "edit-description", value: s.description });
  const save = h("button", { type: "submit" }, "Save changes");
  const form = h(
    "form",
    { class: "filters" },
    field("Event types", types),
    field("Filter (CEL)", filter),
    target.el,
    field("Add or replace headers", setHeaders),
    field("Remove headers", removeHeaders),
    field("Description", description),
    save,
  );
  const before = { types: s.types.join(","), filter: s.filter, ...target.value(), description: s.description };
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    void busy(save, "Saving…", async () => {
      try {
        const req: MessageInitShape<typeof UpdateSubscriptionRequestSchema> = { id: s.id };
        const t = parseTypes(types.value);
        if (t.join(",") !== before.types) {
          if (t.length === 0) throw new Error("keep at least one event type (or delete the subscription)");
          req.setTypes = true;
          req.types = t;
        }
        if (filter.value.trim() !== before.filter) req.filter = filter.value.trim();
        const where = target.value();
        if (where.path !== before.path || where.url !== before.url) (req.path = where.path), (req.url = where.url);
        req.setHeaders = parseHeaders(setHeaders.value);
        req.removeHeaders = commaList(removeHeaders.value);
        if (description.value.trim() !== before.description) req.description = description.value.trim();
        await subscriptions.updateSubscription(req);
        setHeaders.value = "";
        removeHeaders.value = "";
        Object.assign(before, { types: t.join(","), filter: filter.value.trim(), ...where, description: description.value.trim() });
        ok(`Saved ${s.id}.`);
      } catch (err) {
        fail(`Save failed: ${problemText(err)}`);
      }
    });
  });
  return h("fieldset", {}, h("legend", {}, "Edit"), form);
}

/** rotateForm replaces the signing secret; the previous one keeps signing for the grace. */
export function rotateForm(s: Subscription, ok: Report, fail: Report): HTMLElement {
  const grace = h("input", { type: "text", name: "grace", value: "24h", placeholder: "24h (0s: no overlap; at most 7d)" });
  const btn = h("button", { type: "submit" }, "Rotate secret");
  const shown = h("div");
  const rotate = (): void => {
    void busy(btn, "Rotating…", async () => {
      try {
        const g = parseDuration(grace.value);
        if (g === undefined) throw new Error(`grace "${grace.value}": use e.g. 0s, 30m, 24h, 7d`);
        const r = await subscriptions.rotateSubscriptionSecret({ id: s.id, grace: duration(g) });
        replace(shown, secretOnce("The new signing secret", r.subscription?.secret ?? ""));
        ok(`Secret rotated; the previous one signs too for ${grace.value}.`);
      } catch (err) {
        fail(`Rotate failed: ${problemText(err)}`);
      }
    });
  };
  return submitForm({}, rotate, h("fieldset", {}, h("legend", {}, "Signing secret"), field("Grace for the previous secret", grace), btn, shown));
}

/**
 * testEventForm publishes one event to this subscription alone (its
 * destination, path, secret and headers), whatever its types and filter
 * say. The type is chosen from the subscription's exact types and the
 * catalogue (a strict cell refuses types outside it); a cell that is not
 * strict also takes a type typed by hand.
 */
export function testEventForm(s: Subscription, ok: Report, fail: Report): HTMLElement {
  const type = h("select", { name: "test-type" });
  const other = h("input", { type: "text", name: "test-other-type", placeholder: "another type (optional)" });
  const otherField = field("Or type", other);
  const lane = h("input", { type: "text", name: "test-lane", value: "test" });
  const data = h("textarea", { name: "test-data", rows: 3 }, '{"test": true}');
  const send = h("button", { type: "submit" }, "Send test event");
  const note = h("p", { class: "muted" });
  void (async () => {
    try {
      const cat = await eventTypes.listEventTypes({});
      const choices = testEventTypes(s.types, cat.eventTypes, cat.strict);
      replace(type, ...choices.map((t) => h("option", { value: t }, t)));
      otherField.hidden = cat.strict;
      note.textContent = cat.strict ? "This cell takes only catalogued types." : choices.length ? "" : "No catalogued type: type one.";
    } catch (err) {
      // Without the catalogue, the subscription's exact types and a typed one still work.
      replace(type, ...testEventTypes(s.types, [], false).map((t) => h("option", { value: t }, t)));
      note.textContent = `The catalogue could not be read (${errorText(err)}): pick one of the subscription's types or type one.`;
    }
  })();
  const sendTest = (): void => {
    void busy(send, "Sending…", async () => {
      try {
        const t = other.value.trim() || type.value;
        if (!t) throw new Error("choose an event type");
        const body = new TextEncoder().encode(JSON.stringify(parseJSONData(data.value)));
        const r = await ingest.publish({ customerId: s.customerId, subscriptionId: s.id, type: t, laneKey: lane.value.trim() || "test", payload: body, contentType: "application/json" });
        const id = r.routes[0]?.eventId || r.eventId;
        ok(`Test event ${id} (${t}) accepted; it shows in Last deliveries below.`);
      } catch (err) {
        fail(`Test event failed: ${problemText(err)}`);
      }
    });
  };
  return submitForm({}, sendTest, h("fieldset", { "data-testid": "test-event" }, h("legend", {}, "Send a test event"), field("Type", type), otherField, field("Lane", lane), field("Data (JSON)", data), send, note));
}
