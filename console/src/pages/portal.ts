// The customer portal's home: the signed-in customer's subscriptions (and
// nobody else's), a form to make one, the event types it may subscribe
// to, and the endpoints it owns. Everything is asked for with the
// customer's id; the server refuses any other.
import type { Destination } from "../../../sdk/typescript/src/gen/rivora/v1/admin_pb.js";
import type { EventType, Subscription } from "../../../sdk/typescript/src/gen/rivora/v1/subscriptions_pb.js";
import { admin, errorText, eventTypes, problemText, subscriptions } from "../api.js";
import { currentCustomer, customerPicker } from "../customer.js";
import { field, h, replace, status, submitForm, table } from "../dom.js";
import type { Page } from "../main.js";
import { counted } from "../format.js";
import { loadLine, type LoadLine } from "../loadline.js";
import { poll } from "../poll.js";
import { createForm, secretOnce } from "./subscriptionforms.js";
import { destState, pauseButton, pauseKey, routeColumns, signedWith, subLink, subState } from "./subscriptions.js";
import { busy } from "../busy.js";
import { commaList } from "../subscriptions.js";

export const portalPage: Page = (main, me) => {
  const customer = currentCustomer(me);
  const load = loadLine("your subscriptions");
  const ast = status("action");
  const list = h("div", { "data-testid": "my-subscriptions" });
  const created = h("div");
  const catalogue = h("section", { "data-testid": "catalogue" });
  const endpoints = h("section", { "data-testid": "endpoints" });
  let subs: Subscription[] = [];
  // Destinations this customer may subscribe to, when the server lists them.
  let usable: Destination[] = [];

  const act = (b: HTMLButtonElement, s: Subscription, pause: boolean): Promise<void> =>
    busy(
      b,
      pause ? "Pausing…" : "Resuming…",
      async () => {
        try {
          if (pause) await subscriptions.pauseSubscription({ id: s.id, reason: "paused from the portal" });
          else await subscriptions.resumeSubscription({ id: s.id });
          ast.ok(`${pause ? "Paused" : "Resumed"} ${s.id}.`);
          p.now();
        } catch (err) {
          ast.error(`${pause ? "Pause" : "Resume"} failed: ${errorText(err)}`);
        }
      },
      pauseKey(s),
    );

  const form = createForm(
    customer,
    () => [...new Set([...usable.filter((d) => !gone.has(d.id)).map((d) => d.id), ...subs.map((s) => s.destinationId)])].sort(),
    (s) => {
      replace(created, s.secret ? secretOnce(`Subscription ${s.id}'s signing secret`, s.secret) : "");
      ast.ok(`Created ${s.id}.`);
      p.now();
    },
    (msg) => ast.error(msg),
  );
  replace(
    main,
    h("h1", {}, "Your subscriptions"),
    customerPicker(me),
    h("p", { class: "muted" }, "Each subscription sends your events of some types to a destination. A paused subscription holds its events until you resume it."),
    load.el,
    list,
    ast.el,
    created,
    form,
    catalogue,
    endpoints,
  );

  const drawList = (): void => {
    replace(
      list,
      table(`${counted(subs.length, "subscription")} of ${customer}`, [
        { label: "Subscription", cell: subLink },
        { label: "Destination", cell: (s) => s.destinationId },
        { label: "Destination state", cell: destState },
        ...routeColumns(),
        { label: "Signed with", cell: signedWith, className: "wrap" },
        { label: "State", cell: subState },
        { label: "Action", cell: (s) => pauseButton(s, (b, x, pause) => void act(b, x, pause)) },
      ], subs, (s) => ({ "data-id": s.id, "data-paused": String(s.paused) }), "No subscription yet: create one below."),
    );
  };

  const tick = async (): Promise<void> => {
    try {
      subs = (await subscriptions.listSubscriptions({ customerId: customer })).subscriptions.filter((s) => s.customerId === customer);
      drawList();
      load.ok();
    } catch (err) {
      load.failed(err);
    }
  };

  void drawCatalogue(catalogue, (name) => {
    const types = form.querySelector<HTMLInputElement>('input[name="types"]')!;
    types.value = [...commaList(types.value).filter((t) => t !== name), name].join(", ");
  });
  // The endpoints are listed again after each add or delete, so the
  // table and the form's destination suggestions follow. One deleted here
  // leaves the table at once (it comes back, with the error, if the delete
  // fails) and stays out of any listing that still has it.
  let gone = new Set<string>();
  const own = endpointsBox(endpoints, customer, {
    added: (id) => {
      gone.delete(id);
      void loadEndpoints();
    },
    removing: (id) => {
      gone.add(id);
      drawOwn();
    },
    removed: () => void loadEndpoints(),
    kept: (id) => {
      gone.delete(id);
      drawOwn();
    },
  });
  const drawOwn = (): void => own.draw(usable.filter((d) => !gone.has(d.id)));
  // Listed once, and again after each add or delete: a failed listing
  // keeps the last one shown (it read "None yet." when it failed).
  const loadEndpoints = async (): Promise<void> => {
    try {
      const listed = (await admin.listDestinations({})).destinations.filter((d) => !d.ownerCustomer || d.ownerCustomer === customer);
      // Once a listing no longer has it, nothing need hide it.
      gone = new Set([...gone].filter((id) => listed.some((d) => d.id === id)));
      usable = listed;
      drawOwn();
      own.load.ok();
    } catch (err) {
      own.load.failed(err);
    }
  };
  void loadEndpoints();

  const p = poll(tick);
  return () => p.stop();
};

/** The catalogue: what the customer may subscribe to; choosing a type adds it to the form. Read once. */
async function drawCatalogue(box: HTMLElement, pick: (name: string) => void): Promise<void> {
  const load = loadLine("the event-type catalogue", { once: true });
  const body = h("div");
  replace(box, h("h2", {}, "Event types you can subscribe to"), load.el, body);
  try {
    const r = await eventTypes.listEventTypes({});
    replace(
      body,
      table<EventType>(`${r.eventTypes.length} types in the catalogue${r.strict ? " (only these are accepted)" : ""}`, [
        { label: "Type", cell: (t) => h("button", { type: "button", class: "link", title: "Add to the new subscription's types", onclick: () => pick(t.name) }, t.name) },
        { label: "Description", cell: (t) => t.description },
        { label: "Schema", cell: (t) => (t.schema ? "validated" : "any JSON") },
      ], r.eventTypes.filter((t) => !t.deprecated), undefined, "The catalogue is empty: any type (or * for all) may be subscribed to."),
    );
    load.ok();
  } catch (err) {
    load.failed(err);
  }
}

/** What the endpoints box reports: the endpoints it adds and deletes (it says the outcome itself, beside its form). */
interface EndpointEvents {
  added: (id: string) => void;
  /** removing: asked to delete id (the table drops it now). */
  removing: (id: string) => void;
  removed: (id: string) => void;
  /** kept: the delete of id failed (the table shows it again). */
  kept: (id: string) => void;
}

/**
 * endpointsBox is the customer's own endpoints: destinations it owns, made
 * for its own URL (a new one's secret shown once). The form is made once,
 * so what is typed in it outlives a redraw of the table.
 */
function endpointsBox(box: HTMLElement, customer: string, on: EndpointEvents): { draw: (usable: Destination[]) => void; load: LoadLine } {
  const id = h("input", { type: "text", name: "endpoint-id", placeholder: `${customer}-hooks` });
  const url = h("input", { type: "url", name: "endpoint-url", placeholder: "https://hooks.example.com/rivora" });
  // The box's own status line, beside its form: the page's is at its top,
  // out of sight of the form.
  const est = status("action");
  const shown = h("div");
  const list = h("div");
  // Listed once, and after each change: a failure does not say it retries.
  const load = loadLine("your endpoints", { once: true });
  const heading = h("h2", { tabindex: -1 }, "Your own endpoints");
  const addBtn = h("button", { type: "submit" }, "Add endpoint");
  const form = submitForm({ class: "filters" }, () => void add(), field("Endpoint id", id), field("URL", url), addBtn);
  const add = (): Promise<void> =>
    busy(addBtn, "Adding…", async () => {
      try {
        const r = await admin.createDestination({ id: id.value.trim(), url: url.value.trim(), ownerCustomer: customer });
        replace(shown, secretOnce(`Endpoint ${r.destination?.id}'s signing secret`, r.destination?.secret ?? ""));
        est.ok(`Endpoint ${r.destination?.id} added: subscribe to it above.`);
        // Added: the form is ready for another (pressing Add again said "already exists").
        id.value = url.value = "";
        on.added(r.destination?.id ?? "");
      } catch (err) {
        replace(shown);
        est.error(`Adding the endpoint failed: ${problemText(err)}`);
      }
    });
  const remove = async (d: Destination): Promise<void> => {
    // What the server does: it refuses while a subscription delivers to
    // the endpoint or an event is pending there, and says which.
    if (!window.confirm(`Delete endpoint ${d.id} (${d.url})? Only an endpoint no subscription delivers to and with no pending event is deleted: Rivora refuses otherwise and says which subscriptions to delete first.`)) return;
    on.removing(d.id);
    // Its row (and the button) went: the keyboard goes to the section.
    heading.focus({ preventScroll: true });
    try {
      await admin.deleteDestination({ id: d.id });
      est.ok(`Endpoint ${d.id} deleted.`);
      on.removed(d.id);
    } catch (err) {
      on.kept(d.id);
      est.error(`Deleting ${d.id} failed: ${errorText(err)}`);
    }
  };
  replace(box, heading, h("p", { class: "muted" }, "A destination for a URL of yours, with default limits; only you may subscribe to it. It can be deleted once no subscription delivers to it."), load.el, list, form, est.el, shown);
  return {
    load,
    draw: (usable) =>
      replace(
        list,
        table<Destination>("Endpoints you own", [
          { label: "Endpoint", cell: (d) => d.id },
          { label: "URL", cell: (d) => d.url },
          { label: "State", cell: (d) => (d.paused ? "paused" : d.disabled ? "disabled" : "active") },
          { label: "Action", cell: (d) => h("button", { type: "button", "aria-label": `Delete endpoint ${d.id}`, onclick: () => void remove(d) }, "Delete") },
        ], usable.filter((d) => d.ownerCustomer === customer), (d) => ({ "data-endpoint": d.id }), "None yet."),
      ),
  };
}
