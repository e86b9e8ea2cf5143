// The TypeScript test kit shared by sdk/typescript and console (imported
// by relative path): the one poll loop, a real `rivora dev`, the one
// partner endpoint. The Go tests' kit is testkit/poll, testkit/rig and
// testkit/partner beside it.
export { eventually, type PollOptions } from "./poll.js";
export { Dev, freePort, rpc, startDev } from "./dev.js";
export { startPartner, type Answer, type Partner, type PartnerOptions, type Received } from "./partner.js";
