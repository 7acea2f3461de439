// The operator token: kept in sessionStorage (gone when the browser session ends). A link
// with `#token=...` (what `agentrm serve` prints) logs in; the fragment is never sent to
// the server, and it is removed from the address bar at once.
const KEY = "agentrm-operator-token";

export function tokenFromFragment(): string | null {
  const params = new URLSearchParams(location.hash.slice(1));
  const token = params.get("token");
  if (token) history.replaceState(null, "", location.pathname + location.search + "#/live");
  return token;
}

export function storedToken(): string | null {
  return sessionStorage.getItem(KEY);
}

export function keepToken(token: string): void {
  sessionStorage.setItem(KEY, token);
}

export function forgetToken(): void {
  sessionStorage.removeItem(KEY);
}
