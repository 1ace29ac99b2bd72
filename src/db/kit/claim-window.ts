/**
 * How far past `limit` a notice claim looks for other clients' notices when the first ones are over
 * their client's room (NoticeClaimOptions.clientRoom), on both drivers.
 */
export const NOTICE_SCAN_FACTOR = 4;

/**
 * How many due events an event claim looks at per event it may take, on both drivers: the first
 * ones in due order, so events of other keys and clients are found when the first ones are over
 * their key's or client's room (claimDue), and a key's refill skips rows another claim holds
 * (claimOfKey on PostgreSQL).
 */
export const EVENT_SCAN_FACTOR = 4;
