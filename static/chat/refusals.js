// Refusals from the server, in words, and the "busy, retrying in N s" loop. Whatever the refusal,
// the composer keeps what the person typed: only a successful admission clears it.
/* global gettext, ngettext, interpolate */
import { ApiError } from "./api.js";
import { formatNumber } from "./dom.js";

const MAX_BUSY_RETRIES = 8;
// Send waits this long for one of the person's answers to finish before giving up (and keeping the text).
const MAX_TURN_WAIT_MS = 15 * 60 * 1000;

/**
 * Seconds before busy retry `attempt` (0-based): the server decides them (its refusal's
 * `retry_schedule`, by the person's plan: free backs off exponentially, paid linearly); a refusal
 * without one (a proxy's 503) is retried after its Retry-After.
 */
export function busyDelay(attempt, error) {
  const schedule = error.retrySchedule;
  if (schedule && schedule.length) return schedule[Math.min(attempt, schedule.length - 1)];
  return Math.max(1, Number(error.retryAfter) || 2);
}

/** "42 seconds", in the page's language. */
function secondsText(n) {
  return interpolate(ngettext("%(count)s second", "%(count)s seconds", n), { count: n }, true);
}

/**
 * The rate-limit sentence with its wait counted down. The server's sentence already says when
 * ("… Try again in 42 seconds, or upgrade …"): that number becomes the live one, so the wait is
 * said once and is never stale. A sentence without it (or saying it in other words than
 * secondsText's) gets the countdown after it instead.
 */
export function rateLimitText(message, retryAfter) {
  const said = secondsText(retryAfter).replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  const match = new RegExp(`(?<![\\p{L}\\p{N}])${said}(?![\\p{L}\\p{N}])`, "u").exec(message);
  if (!match) {
    return (left) => `${message} ${interpolate(gettext("You can send again in %(count)s s."), { count: formatNumber(left) }, true)}`;
  }
  const before = message.slice(0, match.index);
  const after = message.slice(match.index + match[0].length);
  return (left) => `${before}${secondsText(left)}${after}`;
}

export function createRefusals({ composer, plansUrl }) {
  const plansLink = () => (plansUrl ? { href: plansUrl, text: gettext("See plans") } : null);

  function show(error) {
    if (!(error instanceof ApiError)) {
      composer.showNotice({ text: gettext("Something went wrong on this page. Reload and try again.") });
      console.error(error);
      return;
    }
    if (error.code === "account_suspended" || error.code === "account_closed") {
      // Not the plan's doing and not passing: no plans link, no "try again", Send stays off.
      const title = error.code === "account_suspended" ? gettext("Your account is suspended") : gettext("This account is closed");
      composer.block({ title, text: error.message });
    } else if (error.code === "quota_exceeded" || error.code === "new_chat_limit" || error.status === 403) {
      // Not a wait to count down: the sentence says when, and other chats (or another plan) go on now.
      composer.showNotice({ kind: "warn", text: error.message, link: plansLink() });
    } else if (error.code === "rate_limited" && error.retryAfter) {
      const seconds = Math.max(1, Math.ceil(Number(error.retryAfter)));
      composer.holdSending({ seconds, render: rateLimitText(error.message, seconds), spoken: error.message,
        link: plansLink() });
    } else if (error.code === "rate_limited") {
      composer.showNotice({ kind: "warn", text: error.message, link: plansLink() });
    } else if (error.status === 401) {
      const next = encodeURIComponent(location.pathname + location.search);
      composer.showNotice({ text: error.message, link: { href: `/accounts/login/?next=${next}`, text: gettext("Sign in") } });
    } else {
      composer.showNotice({ text: error.message });
    }
  }

  /**
   * Run an admission (send, regenerate, edit): a 503 busy waits with a visible countdown and
   * retries by itself; any other refusal is shown. Resolves to the turn, or null if refused.
   */
  async function admit(call) {
    composer.setMode("sending");
    composer.clearNotice();
    let waitingSince = null; // for one of the person's other answers to finish (their plan's answers at once)
    for (let attempt = 0; ; attempt++) {
      try {
        const turn = await call();
        if (waitingSince !== null) composer.clearNotice();
        return turn;
      } catch (error) {
        // No time is promised for an answer to end: the refusal says how many are running, and Send asks
        // again every few seconds (the server's Retry-After) until one has, or the person cancels.
        const atOnce = error instanceof ApiError && error.code === "rate_limited" && error.scope === "answers_at_once";
        if (atOnce) {
          waitingSince ??= Date.now();
          if (Date.now() - waitingSince < MAX_TURN_WAIT_MS) {
            composer.setMode("waiting");
            const go = await composer.waitForTurn({
              text: error.message, then: gettext("Your message will be sent as soon as one finishes."),
              seconds: Math.max(1, Number(error.retryAfter) || 3), link: plansLink(),
            });
            if (!go) return null;
            composer.setMode("sending");
            continue;
          }
          composer.showNotice({ kind: "warn",
            text: `${error.message} ${gettext("Your message is kept; send it again later.")}`,
            link: plansLink() });
          return null;
        }
        const busy = error instanceof ApiError && error.code === "busy";
        if (busy && attempt < MAX_BUSY_RETRIES) {
          // "waiting" keeps Enter from starting a second send beside the one being retried.
          composer.setMode("waiting");
          const go = await composer.busyCountdown(busyDelay(attempt, error));
          if (!go) return null;
          composer.setMode("sending");
          continue;
        }
        if (busy) {
          composer.showNotice({ kind: "warn",
            text: gettext("The service is still busy. Your message is kept; try again in a little while.") });
        } else {
          show(error);
        }
        return null;
      }
    }
  }

  return { show, admit };
}
