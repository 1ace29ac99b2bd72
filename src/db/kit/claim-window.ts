/**
 * How far past `limit` a notice claim looks for other clients' notices when the first ones are over
 * their client's room (NoticeClaimOptions.clientRoom), on both drivers.
 */
export const NOTICE_SCAN_FACTOR = 4;
