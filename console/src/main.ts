// The console's shell: sign in, a navigation bar, hash routes, sign out.
import { errorText, isUnauthenticated, onSignedOut, setToken, token, whoAmI, type Me } from "./api.js";
import { forgetCustomer } from "./customer.js";
import { busy, isBusy } from "./busy.js";
import { h, replace, status, takeNotice } from "./dom.js";
import { can } from "./format.js";
import { agentsPage } from "./pages/agents.js";
import { auditPage } from "./pages/audit.js";
import { deadLettersPage } from "./pages/deadletters.js";
import { destinationPage } from "./pages/destination.js";
import { destinationsPage } from "./pages/destinations.js";
import { eventsPage } from "./pages/events.js";
import { eventTypesPage } from "./pages/eventtypes.js";
import { myEventsPage } from "./pages/myevents.js";
import { portalPage } from "./pages/portal.js";
import { subscriptionPage } from "./pages/subscription.js";
import { subscriptionsPage } from "./pages/subscriptions.js";
import { tokensPage } from "./pages/tokens.js";
import { parseRoute } from "./route.js";

/** A page draws into main and returns what stops its polling. */
export type Page = (main: HTMLElement, me: Me, args: string[]) => () => void;

// admin: only an admin token has the page (the others' calls are refused).
type PageTable = Record<string, { title: string; page: Page; nav: boolean; under?: string; admin?: boolean }>;

// The operators' console: every destination and customer.
const operatorPages: PageTable = {
  destinations: { title: "Destinations", page: destinationsPage, nav: true },
  destination: { title: "Destination", page: destinationPage, nav: false, under: "destinations" },
  subscriptions: { title: "Subscriptions", page: subscriptionsPage, nav: true },
  subscription: { title: "Subscription", page: subscriptionPage, nav: false, under: "subscriptions" },
  "dead-letters": { title: "Dead letters", page: deadLettersPage, nav: true },
  events: { title: "Events", page: eventsPage, nav: true },
  "event-types": { title: "Event types", page: eventTypesPage, nav: true },
  audit: { title: "Audit", page: auditPage, nav: true },
  agents: { title: "Agents", page: agentsPage, nav: true },
  tokens: { title: "Tokens", page: tokensPage, nav: true, admin: true },
};

// The customer portal: the signed-in customer's own subscriptions, events
// and dead letters; no operator page is reachable from it.
const portalPages: PageTable = {
  subscriptions: { title: "Subscriptions", page: portalPage, nav: true },
  subscription: { title: "Subscription", page: subscriptionPage, nav: false, under: "subscriptions" },
  events: { title: "Events", page: myEventsPage, nav: true },
  "dead-letters": { title: "Dead letters", page: deadLettersPage, nav: true },
};

/** The pages a role may open, and the one it lands on. */
function pagesFor(m: Me): { pages: PageTable; home: string } {
  if (can(m.role, "self-serve")) return { pages: portalPages, home: "subscriptions" };
  // A publisher's token publishes (SDKs, rivoractl publish): no page would
  // answer it anything but "permission denied".
  if (!can(m.role, "operate")) return { pages: { none: noConsole }, home: "none" };
  const admin = can(m.role, "admin");
  return { pages: Object.fromEntries(Object.entries(operatorPages).filter(([, v]) => admin || !v.admin)), home: "destinations" };
}

// A hash that is not an address (a malformed %-escape) gets a page that
// says so, with the navigation still there; it has nothing to poll.
const badAddress = {
  title: "Bad address",
  page: ((main, m) => {
    replace(
      main,
      h("h1", {}, "Bad address"),
      h("p", { "data-testid": "bad-address" }, `“${location.hash}” is not a console address: it has a malformed %-escape.`),
      h("p", {}, h("a", { href: `#/${pagesFor(m).home}` }, "Go to the start page")),
    );
    return () => {};
  }) satisfies Page,
};

// The page of a role with no console.
const noConsole = {
  title: "No console for this token",
  nav: false,
  page: ((main, m) => {
    replace(
      main,
      h("h1", {}, "No console for this token"),
      h("p", { "data-testid": "no-console" }, `${m.name} is a ${m.role}'s token: it publishes events (the SDKs, rivoractl publish) and reads its customers' events, and opens no console page. Sign out and sign in with an admin's, an operator's, a viewer's or a customer's token.`),
    );
    return () => {};
  }) satisfies Page,
};

const app = document.getElementById("app")!;
let me: Me | undefined;
let stop: (() => void) | undefined;

// Where each history entry was left: its scroll and the link followed
// from it. A new page opens at its top (a destination opened from far
// down a 1,000-row list opened 1,450 px down its page, its heading above
// the screen); Back returns to the row it was opened from, not to the
// list's top. The console restores, not the browser: its pages draw
// their content after the route, when the browser has restored already.
history.scrollRestoration = "manual";

/** Where a page was left: its scroll, and the link followed from it with its place on the screen. */
interface Place {
  y: number;
  href: string | undefined;
  top: number;
}
let restoring: (() => void) | undefined;

// A link followed: where its page is left goes into the page's own
// history entry (its state), before the browser moves to the next entry.
document.addEventListener(
  "click",
  (e) => {
    const link = e.target instanceof Element ? e.target.closest<HTMLAnchorElement>('a[href^="#"]') : null;
    if (!link || !me) return;
    const inPage = link.closest("main") !== null;
    const place: Place = { y: scrollY, href: inPage ? (link.getAttribute("href") ?? undefined) : undefined, top: inPage ? link.getBoundingClientRect().top : 0 };
    history.replaceState({ ...(typeof history.state === "object" ? history.state : {}), rivoraPlace: place }, "");
  },
  true,
);

/** placeOf is where the current history entry's page was left, if it was. */
function placeOf(): Place | undefined {
  const state: unknown = history.state;
  if (typeof state !== "object" || state === null || !("rivoraPlace" in state)) return undefined;
  const p = state.rivoraPlace as Partial<Place>;
  return typeof p.y === "number" ? { y: p.y, href: typeof p.href === "string" ? p.href : undefined, top: Number(p.top) || 0 } : undefined;
}

/**
 * restore brings a page back to where it was left, once its data is drawn
 * (after the route): the link it was left by at the same height on the
 * screen, focused (a refreshed list may have moved its row), else the same
 * scroll. It gives up when the person scrolls, types or clicks first, or
 * after 10 s.
 */
function restore(main: HTMLElement, place: Place): () => void {
  const user = ["wheel", "keydown", "mousedown", "touchstart"] as const;
  const finish = (): void => {
    observer.disconnect();
    clearTimeout(timer);
    for (const e of user) removeEventListener(e, finish, true);
    if (restoring === finish) restoring = undefined;
  };
  const attempt = (): void => {
    const link = place.href === undefined ? undefined : [...main.querySelectorAll<HTMLElement>("a[href]")].find((a) => a.getAttribute("href") === place.href);
    if (link) {
      scrollTo(0, scrollY + link.getBoundingClientRect().top - place.top);
      link.focus({ preventScroll: true });
      finish();
      return;
    }
    // No link (yet): the same scroll, as far as the page reaches so far.
    if (document.documentElement.scrollHeight - innerHeight < place.y) return;
    scrollTo(0, place.y);
    if (place.href === undefined) finish();
  };
  const observer = new ResizeObserver(attempt);
  observer.observe(main);
  const timer = setTimeout(finish, 10_000);
  for (const e of user) addEventListener(e, finish, true);
  attempt();
  return finish;
}

function route(): void {
  stop?.();
  stop = undefined;
  restoring?.();
  if (!token() || !me) {
    signIn();
    return;
  }
  const { pages, home } = pagesFor(me);
  const r = parseRoute(location.hash);
  // An address the role has no page for (an operator page, to a customer)
  // opens the role's home page.
  const name = r ? (pages[r.name] ? r.name : home) : undefined;
  const p = name ? pages[name]! : badAddress;
  const args = r && name === r.name ? r.args : [];
  const main = h("main", { id: "main" });
  const nav = h(
    "nav",
    { "aria-label": "Pages" },
    ...Object.entries(pages)
      .filter(([, v]) => v.nav)
      .map(([k, v]) => h("a", { href: `#/${k}`, "aria-current": k === name || k === pages[name ?? ""]?.under ? "page" : undefined }, v.title)),
  );
  const who = h(
    "div",
    { class: "who" },
    h("span", { "data-testid": "who" }, `${me.name} (${me.role})`),
    h("button", { type: "button", onclick: signOut }, "Sign out"),
  );
  // An address of a page this role may not open says so, above the page
  // it opens instead (a viewer's #/tokens read as the Destinations page).
  const notice = takeNotice() || (r && name !== r.name && operatorPages[r.name] ? `The ${operatorPages[r.name]!.title} page is not open to a ${me.role}'s token: here is ${p.title}.` : "");
  replace(app, h("header", {}, h("strong", { class: "brand" }, "Rivora"), nav, who), notice ? h("p", { class: "status ok", role: "status" }, notice) : "", main);
  document.title = `${p.title} · Rivora console`;
  stop = p.page(main, me, args);
  // A new page takes the focus to its heading, so a screen reader says
  // where the user is; it opens at its top. One returned to (Back) opens
  // where it was left, on the link it was left by.
  const heading = main.querySelector("h1");
  if (heading) {
    heading.tabIndex = -1;
    heading.focus({ preventScroll: true });
  }
  const place = placeOf();
  if (place) restoring = restore(main, place);
  else scrollTo(0, 0);
}

/**
 * signIn draws the sign-in form, saying why when there is a reason.
 * retry, when given, checks the token this tab kept again (Rivora could
 * not be reached to check it): every 5 s and on Try again, until it
 * answers or another token is submitted.
 */
function signIn(why = "", retry?: () => Promise<string | undefined>): void {
  document.title = "Sign in · Rivora console";
  const input = h("input", { type: "password", name: "token", autocomplete: "off", required: true, id: "token" });
  const st = status();
  const submit = h("button", { type: "submit" }, "Sign in");
  const again = h("button", { type: "button" }, "Try again");
  let timer: ReturnType<typeof setTimeout> | undefined;
  const form = h(
    "form",
    { class: "sign-in" },
    h("h1", {}, "Sign in to Rivora"),
    h("p", {}, "Paste an API token (rivoractl tokens create). It is kept in this tab only and forgotten when the tab closes."),
    h("label", { for: "token" }, "Token"),
    input,
    submit,
    st.el,
    retry ? again : "",
  );
  if (why) st.error(why);
  // A press while WhoAmI is asked does nothing; the button says it waits.
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    if (isBusy(submit)) return;
    clearTimeout(timer);
    again.remove();
    void busy(submit, "Signing in…", async () => {
      setToken(input.value.trim());
      try {
        const m = await whoAmI();
        me = m;
        // Changing the hash routes (hashchange); otherwise route here.
        if (!location.hash || location.hash === "#/sign-in") location.hash = `#/${pagesFor(m).home}`;
        else route();
      } catch (err) {
        setToken(null);
        st.error(`Sign-in failed: ${errorText(err)}`);
        input.focus();
      }
    });
  });
  if (retry) {
    const tryAgain = (): void => {
      clearTimeout(timer);
      if (!form.isConnected) return;
      void busy(again, "Trying…", async () => {
        const still = await retry();
        // Not reached yet: say why, and try again (what is typed stays).
        if (still === undefined || !form.isConnected || !token()) return;
        st.error(still);
        timer = setTimeout(tryAgain, 5000);
      });
    };
    again.addEventListener("click", tryAgain);
    timer = setTimeout(tryAgain, 5000);
  }
  replace(app, h("main", { id: "main" }, form));
  input.focus();
}

/**
 * resume signs in with the token this tab kept (a reload). A token
 * Rivora refuses is dropped, saying so; when Rivora cannot be reached,
 * the token is kept and checked again (the page said nothing, and
 * showed an empty sign-in form).
 */
function resume(): void {
  // check answers why the token could not be checked (Rivora not reached),
  // or undefined once the page moved on (signed in, or told it is refused).
  const check = async (): Promise<string | undefined> => {
    try {
      me = await whoAmI();
      route();
      return undefined;
    } catch (err) {
      if (isUnauthenticated(err)) {
        setToken(null);
        signIn(`The token this tab kept is no longer taken (${errorText(err)}): sign in again.`);
        return undefined;
      }
      return `Could not check the token this tab kept: ${errorText(err)}. It is kept and checked again every 5 s; or sign in with another.`;
    }
  };
  void check().then((why) => {
    if (why) signIn(why, check);
  });
}

function signOut(): void {
  setToken(null);
  forgetCustomer();
  me = undefined;
  // Clearing the hash routes (hashchange) a moment later: routing here too
  // drew the sign-in form twice, and a token typed into the first was lost
  // with it (a browser test flaked on it under load).
  if (location.hash) {
    location.hash = "";
    return;
  }
  route();
}

window.addEventListener("hashchange", route);

// The token was revoked or expired mid-session: sign out, saying why.
// The control plane itself is asked first: an agent that has not heard of
// a token made moments ago refuses it for a second or so.
onSignedOut((why) => {
  if (!me) return; // signing in: the sign-in form says why
  whoAmI().catch((err: unknown) => {
    if (!me || !isUnauthenticated(err)) return;
    stop?.();
    stop = undefined;
    setToken(null);
    forgetCustomer();
    me = undefined;
    signIn(`Signed out: Rivora no longer takes this token (${why}). Sign in with another.`);
  });
});

if (token()) resume();
else signIn();
