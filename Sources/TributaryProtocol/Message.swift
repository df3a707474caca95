public import TributaryModel

/// One message of the sync protocol (docs/Protocol.md): what ``MessageCodec`` reads from and writes to one binary
/// WebSocket message.
public enum Message: Sendable, Hashable {
    /// The initiator's first message: who it is and what it holds.
    case hello(Hello)
    /// The acceptor's answer to ``hello(_:)``, which opens the session.
    case welcome(Welcome)
    /// Changesets the receiver lacks, as the sender's log stores them.
    case changesets(ChangesetBatch)
    /// The receiver integrated and durably committed every batch up to one.
    case ack(Acknowledgement)
    /// Asks the other side to reply once it has sent everything it holds now.
    case mark(request: UInt64)
    /// The reply to ``mark(request:)``.
    case markReply(request: UInt64)
    /// Ends the session, saying why and what to do.
    case error(SyncError)
    /// Keepalive: the other side answers ``pong(nonce:)`` with the same nonce.
    case ping(nonce: UInt64)
    /// The answer to ``ping(nonce:)``.
    case pong(nonce: UInt64)
    /// Flexible sync, app to daemon: the subscription set the app wants held, and the one it holds now.
    case query(QueryRequest)
    /// Flexible sync, daemon to app: objects that enter the app's view (their full merge state) or leave it.
    case objects(ObjectStates)
    /// Flexible sync, daemon to app: a subscription set is complete (everything it covers was sent), or refused.
    case queryState(QueryState)
    /// Acceptor to initiator: a part of the base state a compacted daemon starts a replica from.
    case base(BasePart)

    /// The message's name, as docs/Protocol.md spells it.
    public var name: String { kind.description }

    /// The kind byte that starts the message's encoding.
    var kind: MessageCodec.Kind {
        switch self {
        case .hello: .hello
        case .welcome: .welcome
        case .changesets: .changesets
        case .ack: .ack
        case .mark: .mark
        case .markReply: .markReply
        case .error: .error
        case .ping: .ping
        case .pong: .pong
        case .query: .query
        case .objects: .objects
        case .queryState: .queryState
        case .base: .base
        }
    }
}

/// What a session's initiator is.
public enum SyncRole: UInt8, Sendable, Hashable, CustomStringConvertible {
    /// An app replica that syncs through the daemon: the daemon adopts its uploads into its own sequence.
    case app = 1
    /// A daemon that replicates every changeset with another, both ways.
    case peer = 2

    public var description: String { self == .app ? "app" : "peer" }
}

/// The initiator's first message.
public struct Hello: Sendable, Hashable {
    /// The protocol versions the initiator speaks.
    public var versions: ClosedRange<UInt64>
    /// The initiator's replica id.
    public var replica: ReplicaID
    public var role: SyncRole
    /// The schema version of the initiator's models; 0 when it declares none.
    public var schemaVersion: UInt64
    /// The schema version the initiator's replica history starts at (the one it was created with, or created again
    /// with by a client reset); 0 when unknown. A daemon that marks a later version as breaking resets a replica whose
    /// history starts before it, so that it downloads again under the new schema.
    public var firstSchemaVersion: UInt64
    /// Opaque to the protocol: a token the acceptor checks.
    public var credentials: [UInt8]
    /// A human-readable name for logs ("Notes 2.1 on iPad"), at most 256 bytes of UTF-8.
    public var name: String
    /// What the initiator holds.
    public var vector: VersionVector
    /// The changesets waiting in the initiator's pending area, which the acceptor need not send.
    public var pending: [Dot]
    /// How many bytes of `changesets` messages the acceptor may have unacknowledged towards the initiator.
    public var window: UInt64
    /// Whether the initiator is a flexible-sync app: it holds what its subscriptions cover, sends its set in a
    /// `query` message right after `welcome`, and the acceptor sends nothing before that message.
    public var flexible: Bool
    /// For each origin in `vector`, the initiator's own included, the newest changeset of that origin the initiator
    /// holds and its fingerprint (``HistoryAnchor``): the acceptor checks that it holds the same changeset under that
    /// dot, if it holds one. A replica restored from a backup reuses the dots it lost for other changesets; this is how
    /// the two sides find out, and reset, instead of silently missing each other's new ones.
    public var anchors: [HistoryAnchor]

    public init(
        versions: ClosedRange<UInt64> = SyncProtocol.versions, replica: ReplicaID, role: SyncRole,
        schemaVersion: UInt64 = 0, credentials: [UInt8] = [], name: String = "", vector: VersionVector,
        pending: [Dot] = [], window: UInt64 = SyncProtocol.defaultWindow, flexible: Bool = false,
        anchors: [HistoryAnchor] = [], firstSchemaVersion: UInt64 = 0
    ) {
        self.firstSchemaVersion = firstSchemaVersion
        self.flexible = flexible
        self.anchors = anchors
        self.versions = versions
        self.replica = replica
        self.role = role
        self.schemaVersion = schemaVersion
        self.credentials = credentials
        self.name = name
        self.vector = vector
        self.pending = pending
        self.window = window
    }
}

/// A changeset a replica holds, named by its dot, with a fingerprint of what it is (its origin, origin sequence and
/// stamp): two replicas that hold different changesets under one dot have different fingerprints.
public struct HistoryAnchor: Sendable, Hashable {
    public var dot: Dot
    public var fingerprint: UInt64

    public init(dot: Dot, fingerprint: UInt64) {
        self.dot = dot
        self.fingerprint = fingerprint
    }
}

/// The acceptor's answer to ``Hello``.
public struct Welcome: Sendable, Hashable {
    /// The protocol version the session speaks: the highest both sides do.
    public var version: UInt64
    /// The acceptor's replica id.
    public var replica: ReplicaID
    /// What the acceptor holds.
    public var vector: VersionVector
    /// The changesets waiting in the acceptor's pending area.
    public var pending: [Dot]
    /// The highest sequence of the initiator's own changesets the acceptor holds, as written or adopted: an app
    /// resumes its upload after it.
    public var yours: UInt64
    /// How many bytes of `changesets` messages the initiator may have unacknowledged towards the acceptor.
    public var window: UInt64
    /// The largest message the acceptor takes.
    public var maximumMessageBytes: UInt64
    /// Seconds without sending after which a side sends ``Message/ping(nonce:)``.
    public var keepaliveSeconds: UInt64

    public init(
        version: UInt64, replica: ReplicaID, vector: VersionVector, pending: [Dot] = [], yours: UInt64 = 0,
        window: UInt64 = SyncProtocol.defaultWindow,
        maximumMessageBytes: UInt64 = UInt64(SyncProtocol.maximumMessageBytes),
        keepaliveSeconds: UInt64 = SyncProtocol.defaultKeepaliveSeconds
    ) {
        self.version = version
        self.replica = replica
        self.vector = vector
        self.pending = pending
        self.yours = yours
        self.window = window
        self.maximumMessageBytes = maximumMessageBytes
        self.keepaliveSeconds = keepaliveSeconds
    }
}

/// Changesets the receiver lacks, in the sender's log order.
public struct ChangesetBatch: Sendable, Hashable {
    /// 1, 2, 3, ... in each direction of a session.
    public var number: UInt64
    /// Each changeset as the sender's log stores it (``Replica/integrate(encoded:)`` takes either form).
    public var changesets: [[UInt8]]
    /// The vector the receiver holds once it has integrated this batch and every earlier one.
    public var progress: VersionVector
    /// Whether the sender holds more to send right now.
    public var more: Bool

    public init(number: UInt64, changesets: [[UInt8]], progress: VersionVector, more: Bool) {
        self.number = number
        self.changesets = changesets
        self.progress = progress
        self.more = more
    }
}

/// The receiver integrated and durably committed every batch up to ``batch``.
public struct Acknowledgement: Sendable, Hashable {
    /// The last batch acknowledged; acknowledgements are cumulative.
    public var batch: UInt64
    /// The receiver's version vector after that commit.
    public var checkpoint: VersionVector
    /// Changesets the receiver refused (a schema conflict), with the reason. A refusal is final.
    public var rejected: [Rejection]

    public struct Rejection: Sendable, Hashable {
        public var dot: Dot
        public var reason: String
        public init(dot: Dot, reason: String) {
            self.dot = dot
            self.reason = reason
        }
    }

    public init(batch: UInt64, checkpoint: VersionVector, rejected: [Rejection] = []) {
        self.batch = batch
        self.checkpoint = checkpoint
        self.rejected = rejected
    }
}

/// Flexible sync: the subscription set an app wants the daemon to hold for it (docs/Protocol.md, "Flexible sync").
public struct QueryRequest: Sendable, Hashable {
    /// The wanted set's version: 1, 2, 3, ... as the app commits sets.
    public var version: UInt64
    /// The wanted set.
    public var subscriptions: [Subscription]
    /// The version of the set whose objects the app holds now (the last one completed), 0 for none.
    public var heldVersion: UInt64
    /// That set: the app holds the objects it covers, as of the app's vector.
    public var held: [Subscription]
    /// In a session's first `query`: the app's own sequence through which it received every acknowledgement (and so
    /// every compensating write sent before them), or 0 when it does not know. The daemon sends again the
    /// compensating writes of later changesets, and forgets the earlier ones.
    public var acknowledgedThrough: UInt64

    public init(
        version: UInt64, subscriptions: [Subscription], heldVersion: UInt64 = 0, held: [Subscription] = [],
        acknowledgedThrough: UInt64 = 0
    ) {
        self.version = version
        self.subscriptions = subscriptions
        self.heldVersion = heldVersion
        self.held = held
        self.acknowledgedThrough = acknowledgedThrough
    }
}

/// Flexible sync: objects whose full state a daemon sends an app (they entered its view) or that the app removes
/// (they left it).
public struct ObjectStates: Sendable, Hashable {
    /// The subscription set version this is part of the bootstrap of (applied with the others when
    /// ``Message/queryState(_:)`` completes that version), or 0 for a change to apply at once.
    public var query: UInt64
    /// The highest sequence of the app's own changesets the daemon held when it read these states: the app applies
    /// its own later changesets on top of them.
    public var yours: UInt64
    /// The objects, in the order to apply them.
    public var objects: [ObjectState]
    /// For a bootstrap: how many objects it sends in all, over all its messages (for the app's progress); 0 otherwise.
    public var total: UInt64

    public init(query: UInt64, yours: UInt64, objects: [ObjectState], total: UInt64 = 0) {
        self.query = query
        self.yours = yours
        self.objects = objects
        self.total = total
    }
}

/// One object of ``ObjectStates``.
public struct ObjectState: Sendable, Hashable {
    public var type: String
    public var primaryKey: PrimaryKey
    /// The object's stored record (values and merge metadata) as the daemon holds it, or `nil`: the object left the
    /// app's view, and the app removes it (from itself only).
    public var record: [UInt8]?
    /// The app's own changesets whose writes to this object the daemon refused (a compensating write): the app never
    /// applies them to this object again.
    public var refused: [Dot]

    public init(type: String, primaryKey: PrimaryKey, record: [UInt8]?, refused: [Dot] = []) {
        self.type = type
        self.primaryKey = primaryKey
        self.record = record
        self.refused = refused
    }
}

/// Flexible sync: how a daemon took a subscription set.
public struct QueryState: Sendable, Hashable {
    /// The set's version.
    public var version: UInt64
    /// `nil`: complete, everything the set covers was sent. Otherwise the reason the daemon refused it (a field that
    /// is not queryable, a query it cannot parse); the app keeps what it held.
    public var error: String?

    public init(version: UInt64, error: String? = nil) {
        self.version = version
        self.error = error
    }
}

/// A part of a compacted daemon's base state: what replaced the start of its log (docs/Protocol.md, "Compaction").
/// A daemon sends it, in parts, right after `welcome`, to a replica that holds nothing of other replicas yet and whose
/// vector does not include the base's; that replica starts from it once the last part arrived, and the daemon then
/// sends the changesets after the base. Every part repeats the header fields but `held` and `schema`, which only the
/// first one carries.
public struct BasePart: Sendable, Hashable {
    /// 1, 2, 3, ... within the session.
    public var part: UInt64
    /// Whether this is the last part.
    public var last: Bool
    /// What the base holds, counted as version vectors count.
    public var vector: VersionVector
    /// The changesets the base holds, by origin dot and relay dot: the highest sequence per origin. In the first part
    /// only (empty in the others); it has an entry per origin, apps included, so its size is bounded by the
    /// message's alone.
    public var held: VersionVector
    /// The latest stamp the base holds (a hybrid time's raw value).
    public var latest: UInt64
    /// The schema as of the base: in the first part only.
    public var schema: Schema?
    /// How many records the base sends in all its parts, for progress.
    public var total: UInt64
    /// Records as the daemon stores them (``ObjectState/refused`` is empty). A flexible-sync app gets none: its
    /// subscriptions bring it the objects it may read.
    public var objects: [ObjectState]
    /// The relays' copies of changesets the base holds: merges read them.
    public var adoptions: [Adoption]

    /// A changeset's origin dot and the relay dots it was adopted as.
    public struct Adoption: Sendable, Hashable {
        public var dot: Dot
        public var relays: [Dot]
        public init(dot: Dot, relays: [Dot]) {
            self.dot = dot
            self.relays = relays
        }
    }

    public init(
        part: UInt64, last: Bool, vector: VersionVector, held: VersionVector, latest: UInt64, schema: Schema?,
        total: UInt64, objects: [ObjectState], adoptions: [Adoption]
    ) {
        self.part = part
        self.last = last
        self.vector = vector
        self.held = held
        self.latest = latest
        self.schema = schema
        self.total = total
        self.objects = objects
        self.adoptions = adoptions
    }
}

/// The protocol's constants.
public enum SyncProtocol {
    /// The protocol versions this build speaks.
    public static let versions: ClosedRange<UInt64> = 1...1
    /// The WebSocket subprotocol a session is opened with.
    public static let subprotocol = "tributary-sync"
    /// The path a daemon serves sessions on.
    public static let path = "/sync"
    /// The header of a refused upgrade that holds the protocol's error code.
    public static let errorCodeHeader = "Tributary-Error-Code"
    /// The header of a refused upgrade that holds the error's action (`retry`, `reset` or `fatal`).
    public static let errorActionHeader = "Tributary-Error-Action"
    /// The largest message this build reads or writes.
    public static let maximumMessageBytes = 16 << 20
    /// The receive window a side announces unless configured otherwise: 4 MiB.
    public static let defaultWindow: UInt64 = 4 << 20
    /// The keepalive interval a daemon announces unless configured otherwise.
    public static let defaultKeepaliveSeconds: UInt64 = 30
}
