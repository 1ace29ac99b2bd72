import { describe, expect, it } from "vitest";
import { addressBucket } from "../../src/http/client-address.js";

describe("addressBucket", () => {
  it.each([
    ["203.0.113.5", "203.0.113.5"],
    ["::ffff:203.0.113.5", "203.0.113.5"],
    ["2001:db8:1:2::1", "2001:db8:1:2::/64"],
    ["2001:0db8:0001:0002:ffff:0:0:9", "2001:db8:1:2::/64"],
    ["2001:db8::1", "2001:db8:0:0::/64"],
    ["::1", "0:0:0:0::/64"],
    ["fe80::1%eth0", "fe80:0:0:0::/64"],
  ])("%s is counted as %s", (address, bucket) => {
    expect(addressBucket(address)).toBe(bucket);
  });
});
