// The read schedule is a polling rule and lives in core/ beside the rest of the poll plan; the
// submitter still imports it from here.
export { firstPollDelay, nextPollDelay } from "../core/poll-schedule.js";
