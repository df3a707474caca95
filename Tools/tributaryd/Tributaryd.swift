// tributaryd: the Tributary replica daemon.
import ArgumentParser
import Dispatch
import Foundation
import Logging
import Metrics
import Prometheus
import Synchronization
import Tributary
import TributaryCluster
import TributaryDaemon
import TributaryModel
import TributarySync

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

@main
struct Tributaryd: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tributaryd",
        abstract: "Serve a replica to apps and replicate it with peer daemons.",
        discussion: """
            Holds a full replica in DIRECTORY (created if missing). Apps connect with SyncSession \
            (replica.connect(to: ws://HOST:PORT)) and their uploads are adopted into this replica; peer daemons \
            listed with --peer are dialled and every changeset is replicated both ways, resuming where each link \
            stopped. Everything a session receives is committed durably, in group commits, before it is \
            acknowledged.

            Options may come from a JSON configuration file (--config); flags given on the command line win. A \
            sample (docs/tributaryd.json in the source tree):

              {
                "directory": "/var/lib/tributary",
                "listen": "127.0.0.1:7400",
                "peers": ["ws://10.0.0.2:7400", "ws://10.0.0.3:7400"],
                "accessTokens": ["a-long-random-token"],
                "peerToken": "a-long-random-token",
                "tokenKeys": [{"id": "2026-11", "algorithm": "RS256", "publicKeyFile": "/etc/tributary/auth.pem"}],
                "tokenIssuer": "https://auth.example.com",
                "tokenAudiences": ["notes"],
                "tlsCertificateFile": "/etc/tributary/daemon.pem",
                "tlsKeyFile": "/etc/tributary/daemon-key.pem",
                "peerCertificateAuthorityFile": "/etc/tributary/peer-ca.pem",
                "keepaliveSeconds": 30,
                "uploadBytesPerSecond": 8388608,
                "uploadBurstBytes": 67108864,
                "outboundBytesPerSession": 16777216,
                "maximumMessageBytes": 16777216,
                "sendDeadlineSeconds": 60,
                "handshakeDeadlineSeconds": 10,
                "connectionsPerAddress": 256,
                "queryableFields": {"ChatMessage": ["conversationID"]},
                "idleCatchUpSeconds": 5,
                "breakingSchemaVersion": 2,
                "retention": "30d",
                "logLevel": "info",
                "readinessBoundSeconds": 10
              }

            Apps authenticate with JWTs their backend signs (--token-key): the token's sub is the session's \
            user, and every changeset it uploads must name that user as its author. exp and nbf are checked with \
            30 seconds of leeway, iss and aud when --token-issuer and --token-audience are given. A session whose \
            token expires ends; the app's SyncSession asks it for a fresh token and resumes. Peer daemons present \
            a shared access token (--token here, --peer-token there), or, over TLS with --peer-ca, a client \
            certificate that authority signed (mutual TLS; tokens then allow app sessions only). A daemon with \
            neither keys nor access tokens takes every session: fit for loopback only.

            With --tls-certificate and --tls-key the daemon serves wss:// only (TLS 1.2 or later); apps dial \
            wss://HOST:PORT and check the certificate against the system's roots or the authorities their \
            SyncConfiguration.tls names. A plain ws:// request to that port is answered with an HTTP 400 that says \
            to use wss://.

            Limits (configuration file; defaults above): each user (a token's sub, else the app's replica) \
            uploads at most uploadBytesPerSecond over its sessions (0: no limit), after a burst of \
            uploadBurstBytes; a batch over it is refused with rateLimited and a delay, and the app sends it \
            again then. At most outboundBytesPerSession bytes are in flight to one session; a session whose \
            socket does not take a message within sendDeadlineSeconds is closed (a client that never reads). \
            maximumMessageBytes bounds every message and so every changeset (16 MiB at most). A connection \
            has handshakeDeadlineSeconds to send its request; one address has at most connectionsPerAddress \
            connections.

            Apps that subscribe (flexible sync) hold only what their subscriptions cover; queryableFields \
            names, per type, the fields their queries may read (every field when absent). A commit wakes only \
            the apps whose subscriptions it concerns; the others receive it within idleCatchUpSeconds (5).

            With --rules (or permissionRulesFile), the daemon enforces App Services permission rules, in the \
            flexible-sync form ({"rules": {"Type": [roles]}, "defaultRoles": [roles]}) or as the per-collection \
            rules.json documents, in an array. Each app session's role per type is the first whose applyWhen holds \
            for its token's user (%%user.id is the token's sub, %%user.custom_data its claims); it receives only \
            what it may read, and a write its role denies is undone on the app. Apps must sync by subscriptions; \
            peers are trusted. Anything the rules use that the daemon does not support is refused at start, with \
            its path. SIGHUP loads the rules again and applies them to open sessions.

            Releases of an app sync with each other while users update: an earlier release keeps reading and \
            writing what it declares. When a release changes the schema in a way earlier ones must not sync \
            across (a property made required), give its schema version as --breaking-schema-version (or \
            breakingSchemaVersion): apps of earlier releases are then refused with schemaVersionTooOld (update \
            the app; their data stays on the device), and an updated app whose replica was synced under an \
            earlier version is reset and downloads the data again under the new schema.

            History is kept for ever unless --retention (or retention) says how long a device may stay away and \
            still sync without a reset (Device Sync's client max offline time): 30d, 12h, 90m. The daemon then \
            replaces the start of its log that every device and peer seen within that time (or connected now) \
            holds with a base state, when that drops a tenth of the log or more; it looks at start and every \
            tenth of the retention. A device away longer is reset (its unsynced changes recovered), and a new \
            device starts from the base instead of replaying the whole history.

            With --cluster postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE (and --cluster-log NAME, default \
            "default"), the daemon is one of a cluster whose history is a shared log in that PostgreSQL database \
            (tables created on first use). Name a primary and its standbys as HOST1:PORT,HOST2:PORT: the daemon \
            uses the one that takes writes, and moves to a promoted standby when the primary stops answering. Every daemon of a log holds the same replica, built from the log in \
            its own DIRECTORY (empty the first time); an upload is appended to the log and acknowledged once this \
            daemon applied it, and apps on any daemon receive it. Apps may move between daemons without a reset. \
            While PostgreSQL is unreachable, the daemon serves what it holds and answers uploads with "retry \
            later". Peer links are not available in a cluster. With --retention, devices' reports are shared \
            through the database, each daemon compacts its replica through what every device seen by any daemon \
            holds, and one daemon at a time drops the log's entries every daemon applied; a new daemon then starts \
            from a copy of another's replica (--copy-from, or tributary-log backup). --renew-epoch (below) starts a \
            new history after the database lost commits.

            The listening port also answers plain HTTP for operators: GET /health (200 while the daemon \
            serves), GET /ready (200 once every peer link is connected and caught up, else 503 naming the \
            peer and why), GET /metrics (Prometheus text format; docs/Operating.md lists the metrics) and, to a \
            caller presenting an access token, GET /replica (a copy of the replica, for --copy-from). \
            Logs go to standard error, one line each, with the session's id, replica and role.

            SIGINT or SIGTERM stops the daemon: sessions are told to come back after 1 to 5 seconds (spread, so \
            that they do not all return at once), and every acknowledged change is on disk. SIGHUP reads the \
            configuration file, key files, certificate files and rules again and applies their access tokens, token \
            keys and certificates to new connections (rotation without a restart). tributary-log reads the \
            directory while the daemon runs.
            """)

    @Argument(help: "The replica directory (created if missing). Overrides the configuration file's.")
    var directory: String?

    @Option(help: "A JSON configuration file (see above).")
    var config: String?

    @Option(help: "HOST:PORT to listen on (default 127.0.0.1:7400; port 0 picks a free one).")
    var listen: String?

    @Option(name: .customLong("peer"), help: "A peer daemon to replicate with, as ws://HOST:PORT (repeatable).")
    var peers: [String] = []

    @Option(
        help: ArgumentHelp(
            "Run as a daemon of a cluster whose shared log is in this PostgreSQL database: "
                + "postgres://USER[:PASSWORD]@HOST[:PORT][,HOST[:PORT]...]/DATABASE[?sslmode=disable|prefer|require] "
                + "(see above).",
            valueName: "url"))
    var cluster: String?

    @Option(help: ArgumentHelp("The cluster's log, one per app or tenant (default: default).", valueName: "name"))
    var clusterLog: String?

    @Flag(
        help: ArgumentHelp(
            "Give the cluster's log a new epoch, then exit (after PostgreSQL lost commits daemons applied).",
            discussion: """
                After a restore of the database or an asynchronous failover that lost commits, the daemons of the \
                cluster refuse the log ("went back"). Renewing its epoch starts a new history from what the log \
                holds: start every daemon again on an empty directory (keep the old ones: they hold the lost \
                changesets), and apps that synced before are reset, recovering their unsynced changes. Needs \
                --cluster; DIRECTORY is not used. A log that was compacted (--retention) needs --from-replica.
                """))
    var renewEpoch = false

    @Option(
        help: ArgumentHelp(
            "With --renew-epoch: start the new history from this daemon's replica (stopped), into DIRECTORY.",
            discussion: """
                The replica of the daemon that applied the most keeps what the log lost: the new epoch starts from \
                its state, written into DIRECTORY as a new replica, and the log keeps the entries that replica \
                lacks. Start every daemon of the cluster from a copy of DIRECTORY. Apps that hold no more than \
                that replica did sync on without a reset; others are reset and recover their unsynced changes. \
                The replica is only read.
                """,
            valueName: "directory"))
    var fromReplica: String?

    @Option(
        help: ArgumentHelp(
            "With --cluster: start from a copy of a running daemon's replica, fetched from it, when DIRECTORY is empty.",
            discussion: """
                The daemon at the address (ws://HOST:PORT or wss://, as apps dial it; http:// and https:// work \
                too) sends a consistent copy of its replica, taken while it goes on serving, to peers only: this \
                daemon presents --peer-token as one of that daemon's access tokens (or, where that daemon has \
                --peer-ca, its peer certificate), and over wss:// checks that daemon's certificate as it checks \
                peers'. The copy must be of this cluster's log and epoch, and is checked against the size and \
                checksum sent with it before it is kept; the daemon then applies only what the log holds after it. \
                Required to add a daemon once the log was compacted; much faster than applying the whole log in \
                any case. A DIRECTORY that holds a replica already is started as it is (the option may stay in a \
                service's command line).
                """,
            valueName: "url"))
    var copyFrom: String?

    @Option(name: .customLong("token"), help: "An access token apps and peers may present (repeatable; none: anyone).")
    var tokens: [String] = []

    @Option(help: "The token this daemon presents to its peers.")
    var peerToken: String?

    @Option(
        name: .customLong("token-key"),
        help: ArgumentHelp(
            "A key app tokens (JWTs) are signed with, as [ID=]ALGORITHM:FILE (repeatable).",
            discussion: """
                ALGORITHM is HS256 (FILE holds the shared secret, at least 32 bytes), RS256 or ES256 (FILE holds \
                the public key in PEM). With several keys, give each an ID: the kid tokens name.
                """))
    var tokenKeys: [String] = []

    @Option(help: "The issuer (iss) app tokens must name.")
    var tokenIssuer: String?

    @Option(name: .customLong("token-audience"), help: "An audience (aud) app tokens may name (repeatable).")
    var tokenAudiences: [String] = []

    @Option(help: "The daemon's TLS certificate chain, in PEM: serve wss:// (with --tls-key).")
    var tlsCertificate: String?

    @Option(help: "The TLS certificate's private key, in PEM (unencrypted).")
    var tlsKey: String?

    @Option(
        name: .customLong("peer-ca"),
        help: ArgumentHelp(
            "The certificate authority of the peer daemons, in PEM.",
            discussion: """
                Over TLS, a connection presenting a client certificate it signed may open peer sessions (and \
                access tokens allow app sessions only); this daemon trusts it for wss:// peers' certificates too, \
                besides the system's roots.
                """))
    var peerCA: String?

    @Option(help: "The certificate this daemon presents to wss:// peers, in PEM (default: --tls-certificate).")
    var peerCertificate: String?

    @Option(help: "The private key of --peer-certificate, in PEM (default: --tls-key).")
    var peerKey: String?

    @Option(
        help: ArgumentHelp(
            "Permission rules: a JSON file in the form App Services wrote them (see above).", valueName: "file"))
    var rules: String?

    @Option(
        help: ArgumentHelp(
            "The schema version of a release earlier releases must not sync across (see above).",
            valueName: "version"))
    var breakingSchemaVersion: UInt64?

    @Option(
        help: ArgumentHelp(
            "How long a device may stay away and still sync without a reset: 30d, 12h, 90m (default: keep all "
                + "history; see above).", valueName: "duration"))
    var retention: String?

    @Option(help: "Seconds between keepalive pings on idle sessions (default 30).")
    var keepaliveSeconds: UInt64?

    @Option(
        help:
            "The least severe log lines written: trace, debug, info, notice, warning, error or critical (default info)."
    )
    var logLevel: String?

    @Option(
        help: "Seconds a peer link may go without being caught up before GET /ready answers 503 (default 10).")
    var readinessBoundSeconds: UInt64?

    /// A retention such as `30d`, `12h`, `90m` or `45s`.
    static func retention(parsing text: String) throws -> Duration {
        let units: [Character: Int64] = ["d": 86_400, "h": 3_600, "m": 60, "s": 1]
        guard let unit = text.last, let seconds = units[unit], let count = Int64(text.dropLast()), count > 0,
            !count.multipliedReportingOverflow(by: seconds).overflow
        else {
            throw ValidationError(
                "--retention takes a positive whole number and a unit, d, h, m or s (30d, 12h), not \(text)")
        }
        return .seconds(count * seconds)
    }

    func run() async throws {
        let file = try config.map(DaemonFile.load) ?? DaemonFile()
        if renewEpoch {
            try await renewClusterEpoch(file)
            return
        }
        let levelName = logLevel ?? file.logLevel ?? "info"
        guard let level = Logger.Level(rawValue: levelName.lowercased()) else {
            throw ValidationError(
                "--log-level takes one of \(Logger.Level.allCases.map(\.rawValue).joined(separator: ", ")), "
                    + "not \(levelName)")
        }
        // The process's global systems are set up here, once, and nowhere in the libraries.
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        let registry = PrometheusCollectorRegistry()
        MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: registry))
        let logger = Logger(label: "tributaryd")

        guard let directory = directory ?? file.directory else {
            throw ValidationError("name the replica directory: tributaryd DIRECTORY (or \"directory\" in --config)")
        }
        var configuration = SyncServer.Configuration()
        if let listen = listen ?? file.listen {
            guard let colon = listen.lastIndex(of: ":"), let port = Int(listen[listen.index(after: colon)...]),
                (0...65535).contains(port), colon != listen.startIndex
            else {
                throw ValidationError("--listen takes HOST:PORT (port 0 to 65535, 0 picks a free one), not \(listen)")
            }
            configuration.host = String(listen[..<colon]).trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
            configuration.port = port
        }
        for peer in peers.isEmpty ? (file.peers ?? []) : peers {
            configuration.peers.append(try SyncEndpoint(parsing: peer))
        }
        (configuration.accessTokens, configuration.tokenPolicy) = try authentication(file)
        configuration.peerToken = peerToken ?? file.peerToken
        (configuration.tls, configuration.peerTLS) = try tls(file)
        let keys = configuration.tokenPolicy?.keys ?? []
        if let keepalive = keepaliveSeconds ?? file.keepaliveSeconds {
            configuration.keepaliveSeconds = max(1, keepalive)
        }
        if let bound = readinessBoundSeconds ?? file.readinessBoundSeconds {
            configuration.readinessBound = .seconds(min(bound, 86_400))
        }
        try file.applyLimits(to: &configuration)
        if let version = breakingSchemaVersion ?? file.breakingSchemaVersion {
            guard version > 0 else { throw ValidationError("--breaking-schema-version is 1 or more, not 0") }
            configuration.breakingSchemaVersion = version
        }
        if let text = retention ?? file.retention {
            configuration.retention = try Self.retention(parsing: text)
        }
        configuration.permissionRules = try permissionRules(file)
        if configuration.permissionRules != nil, keys.isEmpty {
            throw ValidationError(
                "permission rules need token keys (--token-key): %%user.id is the subject of the app's token")
        }
        configuration.logger = logger
        configuration.metricsRegistry = registry

        if copyFrom != nil, cluster ?? file.cluster == nil {
            throw ValidationError(
                "--copy-from needs --cluster: only the daemons of a cluster share a replica id (two daemons with one "
                    + "id outside a cluster would each write changesets under it)")
        }
        let sharedLog = try await openCluster(file, peers: configuration.peers, logger: logger)
        if let source = copyFrom, let sharedLog {
            do {
                try await copyReplica(from: source, into: directory, of: sharedLog, configuration, logger)
            } catch {
                await sharedLog.close()
                throw error
            }
        }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let replica: Replica
        let server: SyncServer
        if let sharedLog {
            do {
                replica = try sharedLog.openReplica(directory: directory)
            } catch {
                await sharedLog.close()
                throw ValidationError("\(error)")
            }
            server = SyncServer(
                cluster: try LogFollower(log: sharedLog, replica: replica), configuration: configuration)
        } else {
            replica = try Replica.open(directory: directory)
            server = SyncServer(replica: replica, configuration: configuration)
        }
        let port = try await server.start()
        let serving =
            "serving replica \(replica.replicaID) in \(directory) on \(configuration.tls == nil ? "ws" : "wss")://"
            + "\(configuration.host):\(port)"
            + (sharedLog.map {
                "; a daemon of the cluster of log '\($0.configuration.log)' (epoch \($0.epoch)) at "
                    + $0.configuration.servers.map(\.description).joined(separator: ",")
            } ?? "")
            + (configuration.peers.isEmpty
                ? "" : "; peers: \(configuration.peers.map(\.description).joined(separator: ", "))")
            + (configuration.accessTokens.isEmpty && keys.isEmpty
                ? "; no token keys or access tokens: every session is accepted" : "")
            + ((retention ?? file.retention).map { "; history kept for devices seen within \($0) (retention)" } ?? "")
        logger.notice("\(serving)")
        let reloads = reloadOnHangup(server, logger)
        await Self.waitForTerminationSignal()
        reloads.cancel()
        logger.notice("stopping")
        await server.stop()
        await sharedLog?.close()
        replica.close()
        logger.notice("stopped")
    }

    /// Renews the epoch of the cluster's log (--renew-epoch) and says what to do next.
    func renewClusterEpoch(_ file: DaemonFile) async throws {
        guard let log = try await openCluster(file, peers: [], logger: Logger(label: "tributaryd")) else {
            throw ValidationError("--renew-epoch needs --cluster (or \"cluster\" in --config): the log to renew")
        }
        let old = log.epoch
        if let fromReplica {
            do {
                try await renewClusterEpoch(log, from: fromReplica, file)
            } catch {
                await log.close()
                throw error
            }
            await log.close()
            return
        }
        let new: UUID
        do {
            new = try await log.renewEpoch()
        } catch {
            await log.close()
            throw ValidationError("could not renew the epoch: \(error.message)")
        }
        await log.close()
        print(
            """
            renewed the epoch of the shared log '\(log.configuration.log)': \(old) retired, \(new) now.
            Start every daemon of the cluster again on an empty directory; apps that synced before are reset.
            """)
    }

    /// Renews the epoch of the cluster's log from a daemon's replica (--renew-epoch --from-replica) into DIRECTORY.
    /// The caller closes `log`.
    func renewClusterEpoch(_ log: SharedLog, from source: String, _ file: DaemonFile) async throws {
        guard let target = directory ?? file.directory else {
            throw ValidationError("--from-replica needs DIRECTORY: where the new epoch's replica is written")
        }
        var configuration = Replica.Configuration()
        configuration.readOnly = true
        let replica: Replica
        do {
            replica = try Replica.open(directory: source, configuration: configuration)
        } catch {
            throw ValidationError("--from-replica: cannot open \(source): \(error)")
        }
        defer { replica.close() }
        let old = log.epoch
        let renewed: SharedLog.RenewedEpoch
        do {
            renewed = try await log.renewEpoch(from: replica, into: target)
        } catch let error as SharedLogError {
            throw ValidationError("could not renew the epoch: \(error.message)")
        } catch {
            throw ValidationError("could not renew the epoch: \(error)")
        }
        renewed.replica.close()
        print(
            """
            renewed the epoch of the shared log '\(log.configuration.log)': \(old) retired, \(renewed.epoch) now.
            The new history starts from \(source) (\(renewed.heldThrough) changesets of the retired epoch), at \
            position \(renewed.position), with \(renewed.carried) entries of the log it lacked kept after it.
            Start every daemon of the cluster from a copy of \(target) (cp -r while no daemon runs on it, or \
            tributary-log backup); apps that hold more than \(source) did are reset.
            """)
    }

    /// Fetches a copy of the replica of the daemon at `source` into `directory` (--copy-from), unless the directory
    /// holds a replica already. One that holds nothing of the cluster (a start on an empty directory that a compacted
    /// log refused leaves one) is replaced.
    func copyReplica(
        from source: String, into directory: String, of log: SharedLog, _ configuration: SyncServer.Configuration,
        _ logger: Logger
    ) async throws {
        let data = directory + "/data.mdb"
        if FileManager.default.fileExists(atPath: data) {
            var readOnly = Replica.Configuration()
            readOnly.readOnly = true
            let replica = try Replica.open(directory: directory, configuration: readOnly)
            let empty = try replica.lastLocalSequence == 0 && replica.sharedLogPosition() == nil
            replica.close()
            guard empty else {
                logger.notice("\(directory) holds a replica already: it is started as it is, not copied from \(source)")
                return
            }
            for name in ["data.mdb", "lock.mdb"] {
                try? FileManager.default.removeItem(atPath: directory + "/" + name)
            }
        }
        let address =
            source.hasPrefix("http://")
            ? "ws://" + source.dropFirst("http://".count)
            : source.hasPrefix("https://") ? "wss://" + source.dropFirst("https://".count) : source
        let endpoint: SyncEndpoint
        do {
            endpoint = try SyncEndpoint(parsing: address)
        } catch {
            throw ValidationError("--copy-from: \(error)")
        }
        logger.notice("copying the replica of \(endpoint) into \(directory)")
        let started = ContinuousClock.now
        let last = Mutex(ContinuousClock.now)
        let fetched = try await ReplicaCopy.fetch(
            from: endpoint, authorization: configuration.peerToken.map { "Bearer \($0)" }, tls: configuration.peerTLS,
            into: directory, expectedReplica: "\(log.replicaID)"
        ) { received, total in
            // A line every 5 seconds while it lasts.
            let now = ContinuousClock.now
            guard received < total, last.withLock({ now - $0 >= .seconds(5) }) else { return }
            last.withLock { $0 = now }
            logger.info("copying the replica: \(received >> 20) of \(total >> 20) MiB (\(received * 100 / total)%)")
        }
        let took = started.duration(to: .now)
        logger.notice(
            "copied replica \(fetched.replica) from \(endpoint): \(fetched.bytes) bytes in \(took.components.seconds) s"
        )
    }

    /// The cluster's shared log when --cluster (or "cluster") is given: connected, its tables created or migrated.
    func openCluster(_ file: DaemonFile, peers: [SyncEndpoint], logger: Logger) async throws -> SharedLog? {
        guard let url = cluster ?? file.cluster else { return nil }
        guard peers.isEmpty else {
            throw ValidationError(
                "--cluster and --peer do not go together: the daemons of a cluster share its log in PostgreSQL "
                    + "instead of peer links")
        }
        let configuration: SharedLog.Configuration
        do {
            configuration = try SharedLog.Configuration(url: url, log: clusterLog ?? file.clusterLog ?? "default")
        } catch {
            throw ValidationError("--cluster: \(error.message)")
        }
        do {
            return try await SharedLog.open(configuration, logger: logger)
        } catch {
            throw ValidationError("could not open the cluster's log: \(error.message)")
        }
    }

    /// The access tokens and token policy, from the flags or else the configuration file (key files read now).
    func authentication(_ file: DaemonFile) throws -> ([String], TokenPolicy?) {
        let keys =
            tokenKeys.isEmpty ? try (file.tokenKeys ?? []).map { try $0.load() } : try tokenKeys.map(Self.tokenKey)
        let policy =
            keys.isEmpty
            ? nil
            : TokenPolicy(
                keys: keys, issuer: tokenIssuer ?? file.tokenIssuer,
                audiences: tokenAudiences.isEmpty ? (file.tokenAudiences ?? []) : tokenAudiences,
                leewaySeconds: file.tokenLeewaySeconds ?? 30)
        return (tokens.isEmpty ? (file.accessTokens ?? []) : tokens, policy)
    }

    /// How the daemon serves TLS and reaches its peers over it, from the flags or else the configuration file.
    func tls(_ file: DaemonFile) throws -> (SyncServer.TLS?, SyncTLS) {
        let certificate = tlsCertificate ?? file.tlsCertificateFile
        let key = tlsKey ?? file.tlsKeyFile
        let authority = peerCA ?? file.peerCertificateAuthorityFile
        var peerTLS = SyncTLS()
        peerTLS.certificateAuthorityFiles = authority.map { [$0] } ?? []
        if let presented = peerCertificate ?? file.peerCertificateFile ?? certificate,
            let presentedKey = peerKey ?? file.peerKeyFile ?? key
        {
            peerTLS.clientCertificate = CertificateFiles(certificateChain: presented, privateKey: presentedKey)
        }
        switch (certificate, key) {
        case (nil, nil):
            return (nil, peerTLS)
        case (let certificate?, let key?):
            return (
                SyncServer.TLS(
                    certificate: CertificateFiles(certificateChain: certificate, privateKey: key),
                    peerCertificateAuthority: authority), peerTLS
            )
        default:
            throw ValidationError("give --tls-certificate and --tls-key together (or neither, to serve ws://)")
        }
    }

    /// The permission rules of `--rules`, or else of the configuration file's `permissionRulesFile`, or `nil`.
    func permissionRules(_ file: DaemonFile) throws -> PermissionRules? {
        guard let path = rules ?? file.permissionRulesFile else { return nil }
        let bytes: [UInt8]
        do {
            bytes = Array(try Data(contentsOf: URL(fileURLWithPath: path)))
        } catch {
            throw ValidationError("cannot read the permission rules \(path): \(error.localizedDescription)")
        }
        do {
            return try PermissionRules(json: bytes)
        } catch {
            throw ValidationError("the permission rules in \(path) do not load: \(error.message)")
        }
    }

    /// On each SIGHUP, reads the configuration file, the key files and the certificate files again and gives the
    /// daemon the access tokens, token keys and certificates they hold now (for rotating keys and renewing
    /// certificates without a restart). A reload that fails keeps the previous ones and says why.
    func reloadOnHangup(_ server: SyncServer, _ logger: Logger) -> any DispatchSourceSignal {
        signal(SIGHUP, SIG_IGN)
        let source = DispatchSource.makeSignalSource(signal: SIGHUP, queue: .global())
        source.setEventHandler {
            Task {
                do {
                    let file = try config.map(DaemonFile.load) ?? DaemonFile()
                    let (tokens, policy) = try authentication(file)
                    try await server.reloadAuthentication(accessTokens: tokens, tokenPolicy: policy)
                    try server.reloadCertificates()
                    let rules = try permissionRules(file)
                    await server.reloadPermissionRules(rules)
                    let ruleCount = rules.map { ", permission rules for \($0.types.count) types" } ?? ""
                    logger.notice(
                        "reloaded on SIGHUP: \(policy?.keys.count ?? 0) token keys, \(tokens.count) access tokens\(ruleCount)"
                    )
                } catch {
                    logger.error("reload on SIGHUP failed, the previous tokens and keys stay: \(error)")
                }
            }
        }
        source.resume()
        return source
    }

    /// A `--token-key` value: `[ID=]ALGORITHM:FILE`.
    static func tokenKey(_ text: String) throws -> TokenKey {
        var rest = Substring(text)
        var id: String?
        if let equals = rest.firstIndex(of: "="), !rest[..<equals].contains(":") {
            id = String(rest[..<equals])
            rest = rest[rest.index(after: equals)...]
        }
        guard let colon = rest.firstIndex(of: ":"),
            let algorithm = TokenKey.Algorithm(rawValue: rest[..<colon].uppercased())
        else {
            throw ValidationError(
                "--token-key takes [ID=]ALGORITHM:FILE with ALGORITHM one of "
                    + TokenKey.Algorithm.allCases.map(\.rawValue).joined(separator: ", ") + ", not \(text)")
        }
        return try TokenKeyFile(id: id, algorithm: algorithm.rawValue, file: String(rest[rest.index(after: colon)...]))
            .load()
    }

    /// Returns at the first SIGINT or SIGTERM.
    static func waitForTerminationSignal() async {
        signal(SIGINT, SIG_IGN)
        signal(SIGTERM, SIG_IGN)
        let sources = [SIGINT, SIGTERM].map { DispatchSource.makeSignalSource(signal: $0, queue: .global()) }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let once = OnceFlag()
            for source in sources {
                source.setEventHandler { if once.set() { continuation.resume() } }
                source.resume()
            }
        }
        for source in sources { source.cancel() }
    }
}

/// The configuration file's keys (all optional).
struct DaemonFile: Decodable {
    var directory: String?
    var listen: String?
    var peers: [String]?
    var accessTokens: [String]?
    var peerToken: String?
    var keepaliveSeconds: UInt64?
    var logLevel: String?
    var readinessBoundSeconds: UInt64?
    var tokenKeys: [TokenKeyFile]?
    var tokenIssuer: String?
    var tokenAudiences: [String]?
    var tokenLeewaySeconds: Int?
    var tlsCertificateFile: String?
    var tlsKeyFile: String?
    var peerCertificateAuthorityFile: String?
    var peerCertificateFile: String?
    var peerKeyFile: String?
    var uploadBytesPerSecond: Int?
    var uploadBurstBytes: Int?
    var outboundBytesPerSession: UInt64?
    var maximumMessageBytes: Int?
    var sendDeadlineSeconds: UInt64?
    var handshakeDeadlineSeconds: UInt64?
    var connectionsPerAddress: Int?
    var queryableFields: [String: [String]]?
    var bootstrapMessageBytes: Int?
    var idleCatchUpSeconds: UInt64?
    var permissionRulesFile: String?
    var breakingSchemaVersion: UInt64?
    var retention: String?
    var cluster: String?
    var clusterLog: String?

    /// The limits the file sets; the defaults stay for those it does not.
    func applyLimits(to configuration: inout SyncServer.Configuration) throws {
        if let rate = uploadBytesPerSecond {
            guard rate >= 0 else { throw ValidationError("uploadBytesPerSecond is 0 (no limit) or more, not \(rate)") }
            configuration.uploadBytesPerSecond = rate == 0 ? nil : rate
        }
        if let burst = uploadBurstBytes {
            guard burst > 0 else { throw ValidationError("uploadBurstBytes is 1 or more, not \(burst)") }
            configuration.uploadBurstBytes = burst
        }
        if let outbound = outboundBytesPerSession {
            guard outbound >= 64 << 10 else {
                throw ValidationError("outboundBytesPerSession is at least 65536, not \(outbound)")
            }
            configuration.outboundBytesPerSession = outbound
        }
        if let bytes = maximumMessageBytes {
            // The default is the protocol's largest.
            let largest = SyncServer.Configuration().maximumMessageBytes
            guard (64 << 10...largest).contains(bytes) else {
                throw ValidationError("maximumMessageBytes is from 65536 to \(largest), not \(bytes)")
            }
            configuration.maximumMessageBytes = bytes
        }
        if let seconds = sendDeadlineSeconds { configuration.sendDeadline = .seconds(max(1, min(seconds, 86_400))) }
        if let seconds = handshakeDeadlineSeconds {
            configuration.handshakeDeadline = .seconds(max(1, min(seconds, 86_400)))
        }
        if let cap = connectionsPerAddress {
            guard cap > 0 else { throw ValidationError("connectionsPerAddress is 1 or more, not \(cap)") }
            configuration.connectionsPerAddress = cap
        }
        if let queryableFields { configuration.queryableFields = queryableFields.mapValues(Set.init) }
        if let bytes = bootstrapMessageBytes {
            guard (1_024...(8 << 20)).contains(bytes) else {
                throw ValidationError("bootstrapMessageBytes is from 1024 to 8388608, not \(bytes)")
            }
            configuration.bootstrapMessageBytes = bytes
        }
        if let seconds = idleCatchUpSeconds {
            guard (1...3_600).contains(seconds) else {
                throw ValidationError("idleCatchUpSeconds is from 1 to 3600, not \(seconds)")
            }
            configuration.idleCatchUp = .seconds(seconds)
        }
    }

    static func load(_ path: String) throws -> DaemonFile {
        let data: Data
        do {
            data = try Data(contentsOf: URL(fileURLWithPath: path))
        } catch {
            throw ValidationError("cannot read the configuration file \(path): \(error.localizedDescription)")
        }
        do {
            return try JSONDecoder().decode(DaemonFile.self, from: data)
        } catch {
            throw ValidationError("the configuration file \(path) is not valid: \(error)")
        }
    }
}

/// True the first time only.
final class OnceFlag: @unchecked Sendable {
    private var done = false
    private let lock = NSLock()
    func set() -> Bool {
        lock.lock()
        defer { lock.unlock() }
        if done { return false }
        done = true
        return true
    }
}

/// A token key as the configuration file gives it: its material inline (`secret`, `publicKey`) or in a file.
struct TokenKeyFile: Decodable {
    var id: String?
    var algorithm: String
    var secret: String?
    var publicKey: String?
    var file: String?
    var secretFile: String?
    var publicKeyFile: String?

    init(id: String?, algorithm: String, file: String) {
        self.id = id
        self.algorithm = algorithm
        self.file = file
    }

    func load() throws -> TokenKey {
        let name = id.map { "token key '\($0)'" } ?? "the \(algorithm) token key"
        guard let algorithm = TokenKey.Algorithm(rawValue: algorithm.uppercased()) else {
            throw ValidationError(
                "\(name): the algorithm is one of "
                    + TokenKey.Algorithm.allCases.map(\.rawValue).joined(separator: ", ") + ", not \(self.algorithm)")
        }
        var material = secret ?? publicKey
        if let path = file ?? secretFile ?? publicKeyFile {
            do {
                material = try String(contentsOfFile: path, encoding: .utf8)
            } catch {
                throw ValidationError("\(name): cannot read \(path): \(error.localizedDescription)")
            }
            // A secret file usually ends with a newline that is not part of the secret.
            if algorithm == .hs256 { material = material?.trimmingCharacters(in: .newlines) }
        }
        guard let material, !material.isEmpty else {
            throw ValidationError("\(name): give its secret or public key (inline, or a file)")
        }
        return TokenKey(id: id, algorithm: algorithm, material: material)
    }
}
