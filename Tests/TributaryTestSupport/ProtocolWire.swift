package import TributaryModel
package import TributaryProtocol

// The protocol's encoding written out from docs/Protocol.md, and a mutator of valid messages: the message codec's
// fuzzer and the hostile-client tests against a live daemon both use them.

/// The encoding of docs/Protocol.md ("Encoding" and "Messages") written out again from the document, apart from
/// `MessageCodec`, so that the tests hold the codec to the spec rather than to itself, and can write what the codec
/// never writes (sequences of 0, unsorted vectors, unknown kinds, padded varints). It also records where the lengths
/// and counts sit, for the fuzzer's mutations.
package struct Wire: Sendable {
    package var bytes: [UInt8] = []
    /// The byte ranges of the lengths and counts written so far.
    package var lengthFields: [Range<Int>] = []

    package init() {}

    /// A message of this kind byte; the fields follow.
    package init(kind: UInt8) { bytes = [kind] }

    package mutating func u8(_ value: UInt8) { bytes.append(value) }

    /// `uint`: unsigned LEB128, as short as it goes.
    package mutating func uint(_ value: UInt64) {
        var value = value
        while value >= 0x80 {
            bytes.append(UInt8(value & 0x7F) | 0x80)
            value >>= 7
        }
        bytes.append(UInt8(value))
    }

    /// `uint` padded with continuation bytes to `length` bytes (LEB128 allows it; the spec caps it at 10).
    package mutating func uint(_ value: UInt64, paddedTo length: Int) {
        var value = value
        for index in 0..<length {
            let last = index == length - 1
            bytes.append(UInt8(value & 0x7F) | (last ? 0 : 0x80))
            value >>= 7
        }
    }

    /// A length or count: a `uint`, remembered in ``lengthFields``.
    package mutating func length(_ value: Int) {
        let start = bytes.count
        uint(UInt64(value))
        lengthFields.append(start..<bytes.count)
    }

    package mutating func bool(_ value: Bool) { bytes.append(value ? 1 : 0) }

    /// `bytes`: a length, then the bytes.
    package mutating func data(_ value: [UInt8]) {
        length(value.count)
        bytes += value
    }

    /// `string`: `bytes` holding UTF-8.
    package mutating func string(_ value: String) { data(Array(value.utf8)) }

    /// `id`: 8 bytes, little-endian.
    package mutating func id(_ value: UInt64) {
        for shift in stride(from: 0, to: 64, by: 8) { bytes.append(UInt8(truncatingIfNeeded: value >> UInt64(shift))) }
    }

    package mutating func dot(origin: UInt64, sequence: UInt64) {
        id(origin)
        uint(sequence)
    }

    /// `vector`, entries written as given (valid or not).
    package mutating func vector(_ entries: [(replica: UInt64, sequence: UInt64)]) {
        length(entries.count)
        for entry in entries {
            id(entry.replica)
            uint(entry.sequence)
        }
    }

    package mutating func vector(_ vector: VersionVector) {
        self.vector(vector.entries.map { ($0.replica.rawValue, $0.sequence) })
    }

    /// `dots`, written as given.
    package mutating func dots(_ dots: [(origin: UInt64, sequence: UInt64)]) {
        length(dots.count)
        for each in dots { dot(origin: each.origin, sequence: each.sequence) }
    }

    package mutating func dots(_ dots: [Dot]) { self.dots(dots.map { ($0.origin.rawValue, $0.sequence) }) }

    /// A list of subscriptions: a count, then each one's name (empty for anonymous), type and query.
    package mutating func subscriptions(_ subscriptions: [Subscription]) {
        length(subscriptions.count)
        for subscription in subscriptions {
            string(subscription.name ?? "")
            string(subscription.type)
            string(subscription.query)
        }
    }

    /// The spec's encoding of `message`.
    package static func encoding(_ message: Message) -> Wire {
        var wire = Wire()
        switch message {
        case .hello(let hello):
            wire.u8(1)
            wire.uint(hello.versions.lowerBound)
            wire.uint(hello.versions.upperBound)
            wire.id(hello.replica.rawValue)
            wire.u8(hello.role.rawValue)
            wire.uint(hello.schemaVersion)
            wire.data(hello.credentials)
            wire.string(hello.name)
            wire.vector(hello.vector)
            wire.dots(hello.pending)
            wire.uint(hello.window)
            wire.bool(hello.flexible)
            wire.length(hello.anchors.count)
            for anchor in hello.anchors {
                wire.dot(origin: anchor.dot.origin.rawValue, sequence: anchor.dot.sequence)
                wire.id(anchor.fingerprint)
            }
            wire.uint(hello.firstSchemaVersion)
        case .welcome(let welcome):
            wire.u8(2)
            wire.uint(welcome.version)
            wire.id(welcome.replica.rawValue)
            wire.vector(welcome.vector)
            wire.dots(welcome.pending)
            wire.uint(welcome.yours)
            wire.uint(welcome.window)
            wire.uint(welcome.maximumMessageBytes)
            wire.uint(welcome.keepaliveSeconds)
        case .changesets(let batch):
            wire.u8(3)
            wire.uint(batch.number)
            wire.length(batch.changesets.count)
            for changeset in batch.changesets { wire.data(changeset) }
            wire.vector(batch.progress)
            wire.bool(batch.more)
        case .ack(let ack):
            wire.u8(4)
            wire.uint(ack.batch)
            wire.vector(ack.checkpoint)
            wire.length(ack.rejected.count)
            for rejection in ack.rejected {
                wire.dot(origin: rejection.dot.origin.rawValue, sequence: rejection.dot.sequence)
                wire.string(rejection.reason)
            }
        case .mark(let request):
            wire.u8(5)
            wire.uint(request)
        case .markReply(let request):
            wire.u8(6)
            wire.uint(request)
        case .error(let error):
            wire.u8(7)
            wire.uint(error.code.rawValue)
            wire.u8(error.action.rawValue)
            wire.uint(error.retryAfterSeconds)
            wire.string(error.message)
        case .ping(let nonce):
            wire.u8(8)
            wire.uint(nonce)
        case .pong(let nonce):
            wire.u8(9)
            wire.uint(nonce)
        case .query(let query):
            wire.u8(10)
            wire.uint(query.version)
            wire.subscriptions(query.subscriptions)
            wire.uint(query.heldVersion)
            wire.subscriptions(query.held)
            wire.uint(query.acknowledgedThrough)
        case .objects(let states):
            wire.u8(11)
            wire.uint(states.query)
            wire.uint(states.yours)
            wire.uint(states.total)
            wire.length(states.objects.count)
            for object in states.objects {
                wire.string(object.type)
                var key = BinaryWriter()
                key.primaryKey(object.primaryKey)
                wire.bytes += key.bytes
                wire.bool(object.record != nil)
                if let record = object.record { wire.data(record) }
                wire.dots(object.refused)
            }
        case .queryState(let state):
            wire.u8(12)
            wire.uint(state.version)
            wire.u8(state.error == nil ? 1 : 2)
            wire.string(state.error ?? "")
        case .base(let base):
            wire.u8(13)
            wire.uint(base.part)
            wire.bool(base.last)
            wire.vector(base.vector)
            wire.vector(base.held)
            wire.id(base.latest)
            wire.bool(base.schema != nil)
            if let schema = base.schema {
                // The schema as a replica stores it (docs/ChangesetFormat.md), length-prefixed.
                var encoded = BinaryWriter()
                encoded.schema(schema)
                wire.data(encoded.bytes)
            }
            wire.uint(base.total)
            wire.length(base.objects.count)
            for object in base.objects {
                wire.string(object.type)
                var key = BinaryWriter()
                key.primaryKey(object.primaryKey)
                wire.bytes += key.bytes
                wire.data(object.record ?? [])
            }
            wire.length(base.adoptions.count)
            for adoption in base.adoptions {
                wire.dot(origin: adoption.dot.origin.rawValue, sequence: adoption.dot.sequence)
                wire.dots(adoption.relays)
            }
        }
        return wire
    }
}

/// Makes hostile inputs from valid protocol messages: a fifth random bytes, the rest valid encodings changed one to three
/// times (bit flips, bytes set, inserted and deleted, truncation, splices, two messages in one, lengths and counts
/// replaced by huge or malformed ones, the kind byte changed).
package struct MessageMutator: Sendable {
    package let corpus: [Wire]

    package init(corpus: [Wire]) { self.corpus = corpus }

    package func next(_ random: inout SplitMix64) -> [UInt8] {
        if random.chance(20) {
            let length = random.chance(90) ? random.below(48) : random.below(700)
            var bytes = (0..<length).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            if !bytes.isEmpty, random.chance(80) { bytes[0] = UInt8(1 + random.below(9)) }
            return bytes
        }
        let wire = corpus[random.below(corpus.count)]
        var bytes = wire.bytes
        // A length or count replaced by a large one comes first, while the recorded places are still right.
        if !wire.lengthFields.isEmpty, random.chance(30) {
            let field = wire.lengthFields[random.below(wire.lengthFields.count)]
            bytes.replaceSubrange(field, with: largeUint(&random, left: bytes.count - field.upperBound))
            if random.chance(50) { return bytes }
        }
        for _ in 0...random.below(3) { mutate(&bytes, &random) }
        return bytes
    }

    /// A uint that claims more than is there or over a limit: huge, just over, or malformed.
    package func largeUint(_ random: inout SplitMix64, left: Int) -> [UInt8] {
        let values: [UInt64] = [
            .max, 1 << 63, 1 << 32, UInt64(Int.max), UInt64(left + 1), UInt64(left), 5, 17, 25, 601, 1_001,
            10_001, 16_385, 65_537, (16 << 20) + 1,
        ]
        var wire = Wire()
        switch random.below(10) {
        case 0: wire.uint(UInt64(random.below(200)), paddedTo: 11)  // longer than 10 bytes
        case 1: wire.bytes = Array(repeating: 0xFF, count: 9) + [2 + UInt8(random.below(126))]  // over 2^64 - 1
        case 2: wire.uint(values[random.below(values.count)], paddedTo: 10)
        default: wire.uint(values[random.below(values.count)])
        }
        return wire.bytes
    }

    package func mutate(_ bytes: inout [UInt8], _ random: inout SplitMix64) {
        switch random.below(9) {
        case 0:  // flip a bit
            guard !bytes.isEmpty else { return }
            bytes[random.below(bytes.count)] ^= 1 << UInt8(random.below(8))
        case 1:  // set a byte to something interesting
            guard !bytes.isEmpty else { return }
            let values: [UInt8] = [0, 1, 2, 0x7F, 0x80, 0xC0, 0xED, 0xFF, UInt8(truncatingIfNeeded: random.next())]
            bytes[random.below(bytes.count)] = values[random.below(values.count)]
        case 2:  // insert a byte
            bytes.insert(UInt8(truncatingIfNeeded: random.next()), at: random.below(bytes.count + 1))
        case 3:  // delete a byte
            guard !bytes.isEmpty else { return }
            bytes.remove(at: random.below(bytes.count))
        case 4:  // truncate
            bytes.removeLast(random.below(bytes.count + 1))
        case 5:  // splice: the start of this message, the rest of another
            let donor = corpus[random.below(corpus.count)].bytes
            bytes = Array(bytes.prefix(random.below(bytes.count + 1)) + donor.suffix(random.below(donor.count + 1)))
        case 6:  // two messages in one
            bytes += corpus[random.below(corpus.count)].bytes
        case 7:  // a uint written over the bytes at a random place
            let at = random.below(bytes.count + 1)
            let end = min(bytes.count, at + random.below(3))
            bytes.replaceSubrange(at..<end, with: largeUint(&random, left: bytes.count - end))
        default:  // the kind byte changed
            guard !bytes.isEmpty else { return }
            bytes[0] = UInt8(truncatingIfNeeded: 1 + random.below(9))
        }
    }
}
