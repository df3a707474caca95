/// Where each key's entry is in a ``WorkingSet``: an open-addressed hash table of entry positions, probed linearly.
///
/// It holds positions, not keys: the keys stay in the working set's entries, and a slot keeps the low 32 bits of its
/// key's hash next to the position, so a probe compares keys only when those bits match (almost only on the key it
/// looks for). A lookup then reads one or two slots of a compact array (8 bytes each), where a `Dictionary` compares
/// the full key of every slot it probes, each in another cache line; a replay or a large import looked every object up
/// at least once, and spent an eighth of its time there.
///
/// Hashes come from `Hasher`, seeded per process, so keys cannot be chosen to collide.
struct PositionTable {
    /// Each slot: 0 when empty, else the low 32 bits of the key's hash above the entry's position plus one.
    private var slots: [UInt64] = []
    /// The number of positions held.
    private(set) var count = 0

    /// Room for `capacity` positions without growing: at most half the slots are used, so probes stay short.
    mutating func reserveCapacity(_ capacity: Int) {
        if capacity > slots.count / 2 {
            resize(to: capacity.multipliedReportingOverflow(by: 2).overflow ? .max : capacity * 2)
        }
    }

    /// The position whose key `matches`, among those stored with `hash`.
    func position(hash: Int, where matches: (Int) -> Bool) -> Int? {
        guard !slots.isEmpty else { return nil }
        let tag = UInt64(UInt32(truncatingIfNeeded: hash))
        let mask = slots.count - 1
        return slots.withUnsafeBufferPointer { slots in
            var slot = Int(tag) & mask
            while true {
                let value = slots[slot]
                if value == 0 { return nil }
                if value >> 32 == tag, matches(Int(value & 0xFFFF_FFFF) - 1) { return Int(value & 0xFFFF_FFFF) - 1 }
                slot = (slot + 1) & mask
            }
        }
    }

    /// Stores `position` under `hash`. The caller has checked that its key is not in the table. Positions are below
    /// 2³² - 1: a working set's entries would take hundreds of gigabytes before they reached that.
    mutating func insert(hash: Int, position: Int) {
        precondition(position >= 0 && position < 0xFFFF_FFFF, "a working set holds fewer than 2^32 - 1 records")
        if (count + 1) * 2 > slots.count { resize(to: max(16, slots.count * 2)) }
        Self.place(UInt64(UInt32(truncatingIfNeeded: hash)) << 32 | UInt64(position + 1), in: &slots)
        count += 1
    }

    /// Removes every position, and frees the slots.
    mutating func removeAll() {
        slots = []
        count = 0
    }

    private mutating func resize(to minimum: Int) {
        var capacity = 16
        while capacity < minimum && capacity <= Int.max / 4 { capacity *= 2 }
        var resized = [UInt64](repeating: 0, count: capacity)
        for value in slots where value != 0 { Self.place(value, in: &resized) }
        slots = resized
    }

    private static func place(_ value: UInt64, in slots: inout [UInt64]) {
        let mask = slots.count - 1
        slots.withUnsafeMutableBufferPointer { slots in
            var slot = Int(value >> 32) & mask
            while slots[slot] != 0 { slot = (slot + 1) & mask }
            slots[slot] = value
        }
    }
}
