/**
 * A base URL that the relay appends paths to (a bucket's public_base_url, PUBLIC_BASE_URL, a storage
 * endpoint), judged on the parsed URL, never on its text: `https://evil.example/phish?` has an empty
 * query, which `url.search` reports as "" but which turns every appended path into query text, so a
 * link on the relay's own origin would redirect wherever the URL's owner likes. One check for every
 * such URL, so none of them is judged by a string test again.
 */
export function baseUrlProblem(url: URL): string | null {
  if (url.username !== "" || url.password !== "") return "must not contain credentials";
  // Clearing both drops even an empty `?` or `#`: any difference means the URL had one.
  const bare = new URL(url.href);
  bare.search = "";
  bare.hash = "";
  if (bare.href !== url.href) return "must not have a query or fragment (not even an empty ? or #)";
  return null;
}
