// The customer a portal page shows: a customer token acts for one or more
// customers (WhoAmI names them); the portal shows one at a time, the one
// chosen last in this tab (the first by default).
import type { Me } from "./api.js";
import { field, h } from "./dom.js";

const customerKey = "rivora.customer";

/** currentCustomer is the customer the portal shows ("" if the token names none). */
export function currentCustomer(me: Me): string {
  const chosen = sessionStorage.getItem(customerKey);
  if (chosen !== null && me.customers.includes(chosen)) return chosen;
  return me.customers[0] ?? "";
}

/**
 * customerPicker shows which customer the page is about; with several, a
 * select that switches the portal to another (the page is drawn again).
 */
export function customerPicker(me: Me): HTMLElement {
  const current = currentCustomer(me);
  if (me.customers.length <= 1) return h("p", { class: "muted", "data-testid": "customer" }, `Customer ${current || "(none: this token names no customer)"}`);
  const sel = h("select", { name: "customer-scope" }, ...me.customers.map((c) => h("option", { value: c, selected: c === current }, c)));
  sel.addEventListener("change", () => {
    sessionStorage.setItem(customerKey, sel.value);
    window.dispatchEvent(new HashChangeEvent("hashchange"));
  });
  return h("div", { "data-testid": "customer" }, field("Customer", sel));
}

/** forgetCustomer drops the choice (on sign-out). */
export function forgetCustomer(): void {
  sessionStorage.removeItem(customerKey);
}
