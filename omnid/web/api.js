// The daemon's HTTP and WebSocket addresses, with the API key this browser keeps (if any) on every call.
const KEY_STORAGE = "omnid.apiKey";

export function apiKey() {
  return localStorage.getItem(KEY_STORAGE) || "";
}

export function setApiKey(key) {
  if (key) localStorage.setItem(KEY_STORAGE, key);
  else localStorage.removeItem(KEY_STORAGE);
}

export function authHeaders() {
  const key = apiKey();
  return key ? { Authorization: `Bearer ${key}` } : {};
}

// Browsers cannot set headers on a WebSocket; the daemon also reads the key from ?api_key=.
export function socketUrl(path, params = {}) {
  const url = new URL(path, location.href);
  url.protocol = location.protocol === "https:" ? "wss:" : "ws:";
  for (const [name, value] of Object.entries(params)) url.searchParams.set(name, value);
  if (apiKey()) url.searchParams.set("api_key", apiKey());
  return url.href;
}

// An error body of the daemon ({"error": {"message"}}) as one readable line.
export async function errorText(response) {
  try {
    const body = await response.json();
    if (body && body.error && body.error.message) return `${response.status}: ${body.error.message}`;
  } catch (_) { /* not JSON */ }
  return `${response.status} ${response.statusText}`;
}

export async function getJson(path) {
  const response = await fetch(path, { headers: authHeaders() });
  if (!response.ok && response.status !== 503) throw new Error(await errorText(response));
  return response.json();
}
