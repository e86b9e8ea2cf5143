// The console's shell: sign in, a navigation bar, hash routes, sign out.
import { errorText, isUnauthenticated, setToken, token, whoAmI, type Me } from "./api.js";
import { h, replace, status } from "./dom.js";
import { agentsPage } from "./pages/agents.js";
import { auditPage } from "./pages/audit.js";
import { deadLettersPage } from "./pages/deadletters.js";
import { destinationPage } from "./pages/destination.js";
import { destinationsPage } from "./pages/destinations.js";
import { eventsPage } from "./pages/events.js";
import { parseRoute } from "./route.js";

/** A page draws into main and returns what stops its polling. */
export type Page = (main: HTMLElement, me: Me, args: string[]) => () => void;

const pages: Record<string, { title: string; page: Page; nav: boolean }> = {
  destinations: { title: "Destinations", page: destinationsPage, nav: true },
  destination: { title: "Destination", page: destinationPage, nav: false },
  "dead-letters": { title: "Dead letters", page: deadLettersPage, nav: true },
  events: { title: "Events", page: eventsPage, nav: true },
  audit: { title: "Audit", page: auditPage, nav: true },
  agents: { title: "Agents", page: agentsPage, nav: true },
};

// A hash that is not an address (a malformed %-escape) gets a page that
// says so, with the navigation still there; it has nothing to poll.
const badAddress = {
  title: "Bad address",
  page: ((main) => {
    replace(
      main,
      h("h1", {}, "Bad address"),
      h("p", { "data-testid": "bad-address" }, `“${location.hash}” is not a console address: it has a malformed %-escape.`),
      h("p", {}, h("a", { href: "#/destinations" }, "Go to Destinations")),
    );
    return () => {};
  }) satisfies Page,
};

const app = document.getElementById("app")!;
let me: Me | undefined;
let stop: (() => void) | undefined;

function route(): void {
  stop?.();
  stop = undefined;
  if (!token() || !me) {
    signIn();
    return;
  }
  const r = parseRoute(location.hash);
  const name = r?.name;
  const p = r ? (pages[r.name] ?? pages.destinations!) : badAddress;
  const main = h("main", { id: "main" });
  const nav = h(
    "nav",
    { "aria-label": "Pages" },
    ...Object.entries(pages)
      .filter(([, v]) => v.nav)
      .map(([k, v]) => h("a", { href: `#/${k}`, "aria-current": k === name || (k === "destinations" && name === "destination") ? "page" : undefined }, v.title)),
  );
  const who = h(
    "div",
    { class: "who" },
    h("span", { "data-testid": "who" }, `${me.name} (${me.role})`),
    h("button", { type: "button", onclick: signOut }, "Sign out"),
  );
  replace(app, h("header", {}, h("strong", { class: "brand" }, "Rivora"), nav, who), main);
  document.title = `${p.title} · Rivora console`;
  stop = p.page(main, me, r?.args ?? []);
}

function signIn(): void {
  document.title = "Sign in · Rivora console";
  const input = h("input", { type: "password", name: "token", autocomplete: "off", required: true, id: "token" });
  const st = status();
  const form = h(
    "form",
    { class: "sign-in" },
    h("h1", {}, "Sign in to Rivora"),
    h("p", {}, "Paste an API token (rivoractl tokens create). It is kept in this tab only and forgotten when the tab closes."),
    h("label", { for: "token" }, "Token"),
    input,
    h("button", { type: "submit" }, "Sign in"),
    st.el,
  );
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    setToken(input.value.trim());
    whoAmI()
      .then((m) => {
        me = m;
        // Changing the hash routes (hashchange); otherwise route here.
        if (!location.hash || location.hash === "#/sign-in") location.hash = "#/destinations";
        else route();
      })
      .catch((err: unknown) => {
        setToken(null);
        st.error(`Sign-in failed: ${errorText(err)}`);
      });
  });
  replace(app, h("main", { id: "main" }, form));
  input.focus();
}

function signOut(): void {
  setToken(null);
  me = undefined;
  location.hash = "";
  route();
}

window.addEventListener("hashchange", route);

if (token()) {
  whoAmI()
    .then((m) => {
      me = m;
      route();
    })
    .catch((err: unknown) => {
      if (isUnauthenticated(err)) setToken(null);
      signIn();
    });
} else {
  signIn();
}
