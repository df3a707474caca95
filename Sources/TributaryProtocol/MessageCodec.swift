import TributaryModel

/// Reads and writes protocol messages (docs/Protocol.md, "Encoding"). Pure: no I/O, no state.
///
/// Every length and count a message claims is checked against the bytes that remain and against
/// ``MessageLimits`` before anything is allocated, so no input makes the decoder trap or allocate more than a small
/// multiple of the message's own size.
public enum MessageCodec {
    /// The message's encoding: one binary WebSocket message.
    public static func encode(_ message: Message) -> [UInt8] {
        var writer = BinaryWriter(capacity: 64)
        writer.byte(message.kind.rawValue)
        switch message {
        case .hello(let hello):
            writer.varint(hello.versions.lowerBound)
            writer.varint(hello.versions.upperBound)
            writer.fixed64(hello.replica.rawValue)
            writer.byte(hello.role.rawValue)
            writer.varint(hello.schemaVersion)
            writer.lengthPrefixed(hello.credentials)
            writer.string(hello.name)
            writer.vector(hello.vector)
            writer.dots(hello.pending)
            writer.varint(hello.window)
            writer.byte(hello.flexible ? 1 : 0)
            writer.varint(hello.anchors.count)
            for anchor in hello.anchors {
                writer.dot(anchor.dot)
                writer.fixed64(anchor.fingerprint)
            }
            writer.varint(hello.firstSchemaVersion)
        case .welcome(let welcome):
            writer.varint(welcome.version)
            writer.fixed64(welcome.replica.rawValue)
            writer.vector(welcome.vector)
            writer.dots(welcome.pending)
            writer.varint(welcome.yours)
            writer.varint(welcome.window)
            writer.varint(welcome.maximumMessageBytes)
            writer.varint(welcome.keepaliveSeconds)
        case .changesets(let batch):
            writer.bytes.reserveCapacity(32 + batch.changesets.reduce(0) { $0 + $1.count + 5 })
            writer.varint(batch.number)
            writer.varint(batch.changesets.count)
            for changeset in batch.changesets { writer.lengthPrefixed(changeset) }
            writer.vector(batch.progress)
            writer.byte(batch.more ? 1 : 0)
        case .ack(let ack):
            writer.varint(ack.batch)
            writer.vector(ack.checkpoint)
            writer.varint(ack.rejected.count)
            for rejection in ack.rejected {
                writer.dot(rejection.dot)
                writer.string(rejection.reason)
            }
        case .mark(let request):
            writer.varint(request)
        case .markReply(let request):
            writer.varint(request)
        case .error(let error):
            writer.varint(error.code.rawValue)
            writer.byte(error.action.rawValue)
            writer.varint(error.retryAfterSeconds)
            writer.string(error.message)
        case .ping(let nonce):
            writer.varint(nonce)
        case .pong(let nonce):
            writer.varint(nonce)
        case .query(let query):
            writer.varint(query.version)
            writer.subscriptions(query.subscriptions)
            writer.varint(query.heldVersion)
            writer.subscriptions(query.held)
            writer.varint(query.acknowledgedThrough)
        case .objects(let states):
            writer.bytes.reserveCapacity(
                32 + states.objects.reduce(0) { $0 + $1.type.utf8.count + ($1.record?.count ?? 0) + 24 })
            writer.varint(states.query)
            writer.varint(states.yours)
            writer.varint(states.total)
            writer.varint(states.objects.count)
            for object in states.objects {
                writer.string(object.type)
                writer.primaryKey(object.primaryKey)
                if let record = object.record {
                    writer.byte(1)
                    writer.lengthPrefixed(record)
                } else {
                    writer.byte(0)
                }
                writer.dots(object.refused)
            }
        case .queryState(let state):
            writer.varint(state.version)
            writer.byte(state.error == nil ? 1 : 2)
            writer.string(state.error ?? "")
        case .base(let base):
            writer.varint(base.part)
            writer.byte(base.last ? 1 : 0)
            writer.vector(base.vector)
            writer.vector(base.held)
            writer.fixed64(base.latest)
            if let schema = base.schema {
                // Length-prefixed: a stored schema's encoding ends with optional sections, read to its end.
                var encoded = BinaryWriter()
                encoded.schema(schema)
                writer.byte(1)
                writer.lengthPrefixed(encoded.bytes)
            } else {
                writer.byte(0)
            }
            writer.varint(base.total)
            writer.varint(base.objects.count)
            for object in base.objects {
                writer.string(object.type)
                writer.primaryKey(object.primaryKey)
                writer.lengthPrefixed(object.record ?? [])
            }
            writer.varint(base.adoptions.count)
            for adoption in base.adoptions {
                writer.dot(adoption.dot)
                writer.dots(adoption.relays)
            }
        }
        return writer.bytes
    }

    /// Decodes one message.
    ///
    /// - Throws: ``SyncError`` with ``SyncError/Code/protocolViolation``, naming the message and what is wrong with
    ///   it, when the bytes break any rule of the encoding or any of `limits`.
    public static func decode(_ bytes: [UInt8], limits: MessageLimits = .standard) throws(SyncError) -> Message {
        guard bytes.count <= limits.maximumMessageBytes else {
            throw .violation("a message of \(bytes.count) bytes is over the limit of \(limits.maximumMessageBytes)")
        }
        guard let first = bytes.first else { throw .violation("an empty message") }
        guard let kind = Kind(rawValue: first) else { throw .violation("unknown message kind \(first)") }
        var valueLimits = DecodingLimits()
        valueLimits.maximumValueBytes = limits.maximumMessageBytes
        var reader = BinaryReader(bytes, subject: "\(kind) message", limits: valueLimits)
        reader.offset = 1
        do {
            let message = try decode(kind, from: &reader, limits: limits)
            guard reader.isAtEnd else {
                throw reader.error(.trailingData, "\(reader.remaining) bytes after the last field")
            }
            return message
        } catch let error as ChangesetDecodingError {
            throw .violation("malformed \(error.message)")
        } catch let error as SyncError {
            throw error
        } catch {
            throw .violation("malformed \(kind) message: \(error)")
        }
    }

    private static func decode(
        _ kind: Kind, from reader: inout BinaryReader, limits: MessageLimits
    ) throws -> Message {
        switch kind {
        case .hello:
            let lowest = try reader.varint()
            let highest = try reader.varint()
            guard lowest <= highest else {
                throw SyncError.violation("hello: version range \(lowest)...\(highest) is empty")
            }
            let replica = ReplicaID(rawValue: try reader.fixed64())
            let roleByte = try reader.byte()
            guard let role = SyncRole(rawValue: roleByte) else {
                throw SyncError.violation("hello: unknown role \(roleByte)")
            }
            let schemaVersion = try reader.varint()
            let credentials = try reader.bounded("credentials", maximum: limits.maximumCredentialsBytes)
            let name = try reader.boundedString("name", maximum: limits.maximumNameBytes)
            let vector = try reader.vector(limits: limits)
            let pending = try reader.dots(limits: limits)
            let window = try reader.varint()
            let flexible = try reader.bool("flexible")
            let anchorCount = try reader.count("anchors", maximum: limits.maximumDots, minimumBytesEach: 17)
            var anchors: [HistoryAnchor] = []
            anchors.reserveCapacity(anchorCount)
            for _ in 0..<anchorCount {
                let dot = try reader.dot()
                guard dot.sequence > 0 else {
                    throw SyncError.violation("hello: anchor of \(dot.origin) has sequence 0")
                }
                anchors.append(HistoryAnchor(dot: dot, fingerprint: try reader.fixed64()))
            }
            let firstSchemaVersion = try reader.varint()
            return .hello(
                Hello(
                    versions: lowest...highest, replica: replica, role: role, schemaVersion: schemaVersion,
                    credentials: Array(credentials), name: name, vector: vector, pending: pending, window: window,
                    flexible: flexible, anchors: anchors, firstSchemaVersion: firstSchemaVersion))
        case .welcome:
            let version = try reader.varint()
            let replica = ReplicaID(rawValue: try reader.fixed64())
            let vector = try reader.vector(limits: limits)
            let pending = try reader.dots(limits: limits)
            return .welcome(
                Welcome(
                    version: version, replica: replica, vector: vector, pending: pending, yours: try reader.varint(),
                    window: try reader.varint(), maximumMessageBytes: try reader.varint(),
                    keepaliveSeconds: try reader.varint()))
        case .changesets:
            let number = try reader.varint()
            // Each changeset takes at least its one-byte length.
            let count = try reader.count("changesets", maximum: limits.maximumChangesetsPerBatch)
            var changesets: [[UInt8]] = []
            changesets.reserveCapacity(count)
            for _ in 0..<count { changesets.append(Array(try reader.lengthPrefixed("changeset"))) }
            let progress = try reader.vector(limits: limits)
            let more = try reader.bool("more")
            return .changesets(ChangesetBatch(number: number, changesets: changesets, progress: progress, more: more))
        case .ack:
            let batch = try reader.varint()
            let checkpoint = try reader.vector(limits: limits)
            // A rejection takes at least 9 bytes for its dot and one for its reason's length.
            let count = try reader.count("rejections", maximum: limits.maximumRejections, minimumBytesEach: 10)
            var rejected: [Acknowledgement.Rejection] = []
            rejected.reserveCapacity(count)
            for _ in 0..<count {
                let dot = try reader.dot()
                guard dot.sequence > 0 else {
                    throw reader.error(.invalidValue, "rejected dot of \(dot.origin) has sequence 0")
                }
                rejected.append(
                    .init(dot: dot, reason: try reader.boundedString("reason", maximum: limits.maximumTextBytes)))
            }
            return .ack(Acknowledgement(batch: batch, checkpoint: checkpoint, rejected: rejected))
        case .mark:
            return .mark(request: try reader.varint())
        case .markReply:
            return .markReply(request: try reader.varint())
        case .error:
            let code = SyncError.Code(rawValue: try reader.varint())
            let actionByte = try reader.byte()
            guard let action = SyncError.Action(rawValue: actionByte) else {
                throw SyncError.violation("error: unknown action \(actionByte)")
            }
            let retryAfter = try reader.varint()
            let message = try reader.boundedString("message", maximum: limits.maximumTextBytes)
            return .error(SyncError(code, action, message, retryAfterSeconds: retryAfter))
        case .ping:
            return .ping(nonce: try reader.varint())
        case .pong:
            return .pong(nonce: try reader.varint())
        case .query:
            let version = try reader.varint()
            let subscriptions = try reader.subscriptions(
                maximum: limits.maximumSubscriptions, maximumText: limits.maximumTextBytes)
            let heldVersion = try reader.varint()
            let held = try reader.subscriptions(
                maximum: limits.maximumSubscriptions, maximumText: limits.maximumTextBytes)
            let acknowledgedThrough = try reader.varint()
            return .query(
                QueryRequest(
                    version: version, subscriptions: subscriptions, heldVersion: heldVersion, held: held,
                    acknowledgedThrough: acknowledgedThrough))
        case .objects:
            let query = try reader.varint()
            let yours = try reader.varint()
            let total = try reader.varint()
            // Each takes at least a one-byte type length, a two-byte key, its presence byte and a dot count.
            let count = try reader.count("objects", maximum: limits.maximumChangesetsPerBatch * 10, minimumBytesEach: 5)
            var objects: [ObjectState] = []
            objects.reserveCapacity(count)
            for _ in 0..<count {
                let type = try reader.boundedString("type", maximum: limits.maximumNameBytes)
                let key = try reader.primaryKey()
                let record = try reader.bool("record presence") ? Array(try reader.lengthPrefixed("record")) : nil
                let refused = try reader.dots(limits: limits)
                objects.append(ObjectState(type: type, primaryKey: key, record: record, refused: refused))
            }
            return .objects(ObjectStates(query: query, yours: yours, objects: objects, total: total))
        case .base:
            let part = try reader.varint()
            let last = try reader.bool("last")
            let vector = try reader.vector(limits: limits)
            // One entry per origin the base holds changesets of, apps included: bounded by the message's size only.
            let held = try reader.vector(limits: limits, maximumEntries: limits.maximumMessageBytes / 9)
            let latest = try reader.fixed64()
            var schema: Schema?
            if try reader.bool("schema presence") {
                var schemaReader = BinaryReader(
                    Array(try reader.lengthPrefixed("schema")), subject: "base message's schema",
                    limits: reader.limits)
                schema = try schemaReader.schema()
                guard schemaReader.isAtEnd else {
                    throw reader.error(.trailingData, "\(schemaReader.remaining) bytes after the schema")
                }
            }
            let total = try reader.varint()
            // Each takes at least a one-byte type length, a two-byte key and a one-byte record length.
            let count = try reader.count("records", maximum: limits.maximumChangesetsPerBatch * 10, minimumBytesEach: 4)
            var objects: [ObjectState] = []
            objects.reserveCapacity(count)
            for _ in 0..<count {
                let type = try reader.boundedString("type", maximum: limits.maximumNameBytes)
                let key = try reader.primaryKey()
                let record = Array(try reader.lengthPrefixed("record"))
                guard !record.isEmpty else { throw reader.error(.invalidValue, "base: an empty record of \(type)") }
                objects.append(ObjectState(type: type, primaryKey: key, record: record))
            }
            // Each takes at least a 9-byte dot and a one-byte count.
            let adoptionCount = try reader.count("adoptions", maximum: .max, minimumBytesEach: 10)
            var adoptions: [BasePart.Adoption] = []
            adoptions.reserveCapacity(adoptionCount)
            for _ in 0..<adoptionCount {
                adoptions.append(BasePart.Adoption(dot: try reader.dot(), relays: try reader.dots(limits: limits)))
            }
            return .base(
                BasePart(
                    part: part, last: last, vector: vector, held: held, latest: latest, schema: schema, total: total,
                    objects: objects, adoptions: adoptions))
        case .queryState:
            let version = try reader.varint()
            let state = try reader.byte()
            let message = try reader.boundedString("message", maximum: limits.maximumTextBytes)
            switch state {
            case 1: return .queryState(QueryState(version: version))
            case 2: return .queryState(QueryState(version: version, error: message))
            default: throw SyncError.violation("queryState: unknown state \(state)")
            }
        }
    }

    /// The kind byte that starts each message.
    enum Kind: UInt8, CustomStringConvertible {
        case hello = 1
        case welcome = 2
        case changesets = 3
        case ack = 4
        case mark = 5
        case markReply = 6
        case error = 7
        case ping = 8
        case pong = 9
        case query = 10
        case objects = 11
        case queryState = 12
        case base = 13

        var description: String {
            switch self {
            case .hello: "hello"
            case .welcome: "welcome"
            case .changesets: "changesets"
            case .ack: "ack"
            case .mark: "mark"
            case .markReply: "markReply"
            case .error: "error"
            case .ping: "ping"
            case .pong: "pong"
            case .query: "query"
            case .objects: "objects"
            case .queryState: "queryState"
            case .base: "base"
            }
        }
    }
}

/// The bounds every decoded message is checked against (docs/Protocol.md, "Encoding").
public struct MessageLimits: Sendable, Hashable {
    /// The largest message. Default: 16 MiB.
    public var maximumMessageBytes = SyncProtocol.maximumMessageBytes
    /// The most changesets in one `changesets` message. Default: 10,000.
    public var maximumChangesetsPerBatch = 10_000
    /// The most entries in a version vector. Default: 65,536.
    public var maximumVectorEntries = 65_536
    /// The most dots in a list. Default: 65,536.
    public var maximumDots = 65_536
    /// The most rejections in one `ack`. Default: 1,000.
    public var maximumRejections = 1_000
    /// The longest credentials. Default: 16 KiB.
    public var maximumCredentialsBytes = 16 << 10
    /// The longest name. Default: 256 bytes.
    public var maximumNameBytes = 256
    /// The longest error message or rejection reason. Default: 4 KiB.
    public var maximumTextBytes = 4 << 10
    /// The most subscriptions in one set of a `query` message. Default: 1,000.
    public var maximumSubscriptions = 1_000
    /// The most bytes of `changesets` messages this side has in flight to the other, unacknowledged, whatever window
    /// the other side announces: what one session may hold of a daemon's sending. Default: 64 MiB.
    public var maximumWindow: UInt64 = 64 << 20

    public init() {}

    /// The defaults.
    public static let standard = MessageLimits()
}

extension BinaryWriter {
    /// A version vector: its entry count, then each entry's replica id (8 bytes) and sequence.
    mutating func vector(_ vector: VersionVector) { versionVector(vector) }

    mutating func dots(_ dots: [Dot]) {
        varint(dots.count)
        for each in dots { dot(each) }
    }
}

extension BinaryReader {
    mutating func bounded(_ what: String, maximum: Int) throws(ChangesetDecodingError) -> ArraySlice<UInt8> {
        let length = try count(what + " length", maximum: maximum)
        return try rawBytes(length, what)
    }

    mutating func boundedString(_ what: String, maximum: Int) throws(ChangesetDecodingError) -> String {
        let slice = try bounded(what, maximum: maximum)
        guard let string = String(validating: slice, as: UTF8.self) else {
            throw error(.invalidValue, "\(what) is not valid UTF-8")
        }
        return string
    }

    mutating func bool(_ what: String) throws(ChangesetDecodingError) -> Bool {
        switch try byte() {
        case 0: return false
        case 1: return true
        case let other: throw error(.invalidValue, "\(what) is \(other), not 0 or 1")
        }
    }

    /// A version vector of at most `maximumEntries` entries (``MessageLimits/maximumVectorEntries`` when `nil`).
    mutating func vector(
        limits: MessageLimits, maximumEntries: Int? = nil
    ) throws(ChangesetDecodingError) -> VersionVector {
        let count = try self.count(
            "vector entries", maximum: maximumEntries ?? limits.maximumVectorEntries, minimumBytesEach: 9)
        var pairs: [(ReplicaID, UInt64)] = []
        pairs.reserveCapacity(count)
        for _ in 0..<count {
            let replica = ReplicaID(rawValue: try fixed64())
            let sequence = try varint()
            guard sequence > 0 else { throw error(.invalidValue, "vector entry for \(replica) has sequence 0") }
            if let last = pairs.last, last.0 >= replica {
                throw error(.invalidValue, "vector entries are not in rising replica order at \(replica)")
            }
            pairs.append((replica, sequence))
        }
        return VersionVector(pairs)
    }

    mutating func dots(limits: MessageLimits) throws(ChangesetDecodingError) -> [Dot] {
        let count = try self.count("dots", maximum: limits.maximumDots, minimumBytesEach: 9)
        var dots: [Dot] = []
        dots.reserveCapacity(count)
        for _ in 0..<count {
            let dot = try dot()
            guard dot.sequence > 0 else { throw error(.invalidValue, "dot of \(dot.origin) has sequence 0") }
            dots.append(dot)
        }
        return dots
    }
}
