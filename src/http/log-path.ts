/**
 * A request's path as logged: a file link's token is its capability (docs/contract.md, "Links that
 * last"), so it is never written; every other path is logged as it came.
 */
export const loggedPath = (path: string): string => (path.startsWith("/files/") ? "/files/{token}" : path);
