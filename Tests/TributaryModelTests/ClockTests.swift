import Testing
import TributaryModel

@Suite("Hybrid logical clock") struct ClockTests {
    @Test("A reading packs milliseconds in the high 48 bits and a counter in the low 16")
    func packing() {
        let time = HybridTime(milliseconds: 1_700_000_000_123, counter: 7)
        #expect(time.milliseconds == 1_700_000_000_123)
        #expect(time.counter == 7)
        #expect(time.rawValue == 1_700_000_000_123 << 16 | 7)
        #expect(time.description == "1700000000123.7")
        #expect(HybridTime(milliseconds: 5, counter: .max) < HybridTime(milliseconds: 6))
        #expect(HybridTime.zero < HybridTime(milliseconds: 0, counter: 1))
    }

    @Test("Readings follow the wall clock while it moves forward")
    func followsWallClock() {
        var clock = HybridLogicalClock()
        #expect(clock.tick(wallMilliseconds: 1_000) == HybridTime(milliseconds: 1_000))
        #expect(clock.tick(wallMilliseconds: 1_005) == HybridTime(milliseconds: 1_005))
        #expect(clock.tick(wallMilliseconds: 1_005) == HybridTime(milliseconds: 1_005, counter: 1))
        #expect(clock.tick(wallMilliseconds: 1_006) == HybridTime(milliseconds: 1_006))
        #expect(clock.latest == HybridTime(milliseconds: 1_006))
    }

    @Test("Readings only grow when the wall clock goes backwards")
    func monotonicWhenWallClockGoesBack() {
        var clock = HybridLogicalClock()
        var previous = HybridTime.zero
        let walls: [UInt64] = [10_000, 10_000, 9_999, 5_000, 0, 10_000, 10_001, 10_001, 3, 20_000, 19_999]
        for wall in walls {
            let reading = clock.tick(wallMilliseconds: wall)
            #expect(reading > previous, "wall \(wall)")
            #expect(reading.milliseconds >= wall, "a reading is never behind its wall clock")
            previous = reading
        }
        // While the wall clock was behind, the clock stayed at its latest millisecond and counted up.
        var stalled = HybridLogicalClock()
        _ = stalled.tick(wallMilliseconds: 10_000)
        #expect(stalled.tick(wallMilliseconds: 9_000) == HybridTime(milliseconds: 10_000, counter: 1))
        #expect(stalled.tick(wallMilliseconds: 8_000) == HybridTime(milliseconds: 10_000, counter: 2))
    }

    @Test("A full counter borrows the next millisecond")
    func counterOverflow() {
        var clock = HybridLogicalClock(latest: HybridTime(milliseconds: 1_000, counter: .max - 1))
        #expect(clock.tick(wallMilliseconds: 1_000) == HybridTime(milliseconds: 1_000, counter: .max))
        #expect(clock.tick(wallMilliseconds: 1_000) == HybridTime(milliseconds: 1_001, counter: 0))
        #expect(clock.tick(wallMilliseconds: 900) == HybridTime(milliseconds: 1_001, counter: 1))
        // 70,000 readings in one millisecond: strictly increasing, spilling into later milliseconds.
        var burst = HybridLogicalClock()
        var previous = burst.tick(wallMilliseconds: 50)
        var outOfOrder = 0
        for _ in 0..<70_000 {
            let reading = burst.tick(wallMilliseconds: 50)
            if reading <= previous { outOfOrder += 1 }
            previous = reading
        }
        #expect(outOfOrder == 0)
        #expect(previous == HybridTime(rawValue: HybridTime(milliseconds: 50).rawValue + 70_000))
        #expect(previous.milliseconds == 51)
    }

    @Test("Observing a remote reading within the skew bound moves the clock past it")
    func observeWithinBound() throws {
        var clock = HybridLogicalClock()
        _ = clock.tick(wallMilliseconds: 1_000)
        let remote = HybridTime(milliseconds: 1_500, counter: 3)
        try clock.observe(remote, wallMilliseconds: 1_000, maximumSkewMilliseconds: 500)
        #expect(clock.latest == remote)
        #expect(clock.tick(wallMilliseconds: 1_001) == HybridTime(milliseconds: 1_500, counter: 4))
        // Exactly at the bound, any counter, is accepted.
        try clock.observe(
            HybridTime(milliseconds: 2_000, counter: .max),
            wallMilliseconds: 1_500,
            maximumSkewMilliseconds: 500
        )
        #expect(clock.latest == HybridTime(milliseconds: 2_000, counter: .max))
        // An older remote reading leaves the clock alone.
        try clock.observe(HybridTime(milliseconds: 10), wallMilliseconds: 1_500, maximumSkewMilliseconds: 500)
        #expect(clock.latest == HybridTime(milliseconds: 2_000, counter: .max))
        // A bound so large that wall + bound overflows accepts everything.
        try clock.observe(HybridTime(rawValue: .max), wallMilliseconds: 1_500, maximumSkewMilliseconds: .max)
        #expect(clock.latest == HybridTime(rawValue: .max))
    }

    @Test("Rule 9: a remote reading beyond the skew bound is refused, naming both readings, and changes nothing")
    func observeBeyondBound() {
        var clock = HybridLogicalClock()
        _ = clock.tick(wallMilliseconds: 1_000)
        let before = clock
        let remote = HybridTime(milliseconds: 61_001, counter: 2)
        #expect {
            try clock.observe(remote, wallMilliseconds: 1_000, maximumSkewMilliseconds: 60_000)
        } throws: { error in
            guard let skew = error as? ClockSkewError else { return false }
            return skew.remote == remote && skew.localMilliseconds == 1_000 && skew.maximumSkewMilliseconds == 60_000
                && skew.description
                    == "stamp 61001.2 is 60001 ms ahead of this replica's clock (1000 ms); the limit is 60000 ms. "
                    + "Check the sender's clock"
        }
        #expect(clock == before)
        // One millisecond inside the bound is fine.
        #expect(throws: Never.self) {
            try clock.observe(
                HybridTime(milliseconds: 61_000),
                wallMilliseconds: 1_000,
                maximumSkewMilliseconds: 60_000
            )
        }
    }

    @Test("Stamps order by time, then replica; the default stamp precedes every write")
    func stamps() {
        let a = Stamp(time: HybridTime(milliseconds: 5), replica: ReplicaID(rawValue: 9))
        let b = Stamp(time: HybridTime(milliseconds: 5), replica: ReplicaID(rawValue: 10))
        let c = Stamp(time: HybridTime(milliseconds: 5, counter: 1), replica: ReplicaID(rawValue: 1))
        #expect(a < b)
        #expect(b < c)
        #expect(Stamp.zero < a)
        #expect([c, Stamp.zero, b, a].sorted() == [Stamp.zero, a, b, c])
        #expect(a.description == "5.0@0000000000000009")
    }
}
