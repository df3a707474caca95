import Testing
import TributaryModel

private let a = ReplicaID(rawValue: 0xA)
private let b = ReplicaID(rawValue: 0xB)
private let c = ReplicaID(rawValue: 0xC)

@Suite("Version vectors") struct VersionVectorTests {
    @Test("Entries stay sorted by replica whatever the insertion order")
    func sortedEntries() {
        var forward = VersionVector()
        forward.advance(a, to: 1)
        forward.advance(b, to: 2)
        forward.advance(c, to: 3)
        var backward = VersionVector()
        backward.advance(c, to: 3)
        backward.advance(a, to: 1)
        backward.advance(b, to: 2)
        #expect(forward == backward)
        #expect(forward.entries.map(\.replica) == [a, b, c])
        #expect(VersionVector([(c, 3), (b, 2), (a, 1)]) == forward)
        #expect(forward.description == "[000000000000000a:1, 000000000000000b:2, 000000000000000c:3]")
    }

    @Test("advance never lowers an entry, and ignores sequence 0")
    func advance() {
        var vector = VersionVector([(a, 5)])
        vector.advance(a, to: 3)
        #expect(vector[a] == 5)
        vector.advance(a, to: 8)
        #expect(vector[a] == 8)
        vector.advance(b, to: 0)
        #expect(vector.entries.count == 1)
        #expect(vector[b] == 0)
        #expect(VersionVector([(a, 2), (a, 7), (a, 4)])[a] == 7)
    }

    @Test("includes: dots and whole vectors")
    func includes() {
        let vector = VersionVector([(a, 3), (b, 1)])
        #expect(vector.includes(Dot(origin: a, sequence: 3)))
        #expect(!vector.includes(Dot(origin: a, sequence: 4)))
        #expect(!vector.includes(Dot(origin: c, sequence: 1)))
        #expect(vector.includes(VersionVector([(a, 2)])))
        #expect(vector.includes(VersionVector()))
        #expect(!vector.includes(VersionVector([(a, 2), (c, 1)])))
        #expect(!VersionVector().includes(vector))
        #expect(vector.includes(vector))
    }

    @Test("formUnion is the entry-wise maximum, commutative and idempotent")
    func union() {
        let x = VersionVector([(a, 3), (b, 1)])
        let y = VersionVector([(b, 4), (c, 2)])
        var xy = x
        xy.formUnion(y)
        var yx = y
        yx.formUnion(x)
        #expect(xy == VersionVector([(a, 3), (b, 4), (c, 2)]))
        #expect(xy == yx)
        var twice = xy
        twice.formUnion(y)
        #expect(twice == xy)
        #expect(xy.includes(x) && xy.includes(y))
        #expect(xy.total == 9)
    }

    @Test("Random vectors: union is the least upper bound (seeded)")
    func randomUnions() {
        var random = FuzzRandom.seeded(label: "VersionVectorTests.randomUnions")
        func vector() -> VersionVector {
            VersionVector(
                (0..<random.below(6)).map { _ in (ReplicaID(rawValue: UInt64(random.below(8))), UInt64(random.below(5)))
                }
            )
        }
        for _ in 0..<1_000 {
            let x = vector()
            let y = vector()
            var union = x
            union.formUnion(y)
            #expect(union.includes(x) && union.includes(y))
            for entry in union.entries {
                #expect(entry.sequence == max(x[entry.replica], y[entry.replica]))
                #expect(entry.sequence > 0)
            }
            #expect(union.entries.map(\.replica) == union.entries.map(\.replica).sorted())
        }
    }

    @Test("A context round-trips through the changeset codec in replica order")
    func codecOrder() throws {
        let context = VersionVector([(c, 9), (a, 1), (b, 1 << 40)])
        let changeset = Changeset(
            origin: a,
            originSequence: 2,
            time: HybridTime(milliseconds: 1),
            context: context,
            schemaVersion: 0,
            instructions: []
        )
        #expect(try ChangesetCodec.decode(ChangesetCodec.encode(changeset)).context == context)
    }
}
