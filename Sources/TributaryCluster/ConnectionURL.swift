import Foundation

/// The parts of a PostgreSQL connection URL, `postgres://user[:password]@host[:port][,host[:port]...]/database
/// [?sslmode=...]`, read as libpq reads one: several comma-separated hosts name a primary and its standbys, which
/// `URLComponents` cannot parse.
struct ConnectionURL {
    var user: String
    var password: String?
    var servers: [SharedLog.Server]
    var database: String
    var tls: SharedLog.TLSMode

    init(_ text: String) throws(SharedLogError) {
        let example = "postgres://user@host:5432/database"
        guard let schemeEnd = text.range(of: "://"),
            ["postgres", "postgresql"].contains(text[..<schemeEnd.lowerBound].lowercased())
        else {
            throw SharedLogError(.invalidArgument, "'\(text)' is not a PostgreSQL URL: write \(example)")
        }
        var rest = text[schemeEnd.upperBound...]
        var query = Substring("")
        if let mark = rest.firstIndex(of: "?") {
            query = rest[rest.index(after: mark)...]
            rest = rest[..<mark]
        }
        var path = Substring("")
        if let slash = rest.firstIndex(of: "/") {
            path = rest[rest.index(after: slash)...]
            rest = rest[..<slash]
        }
        // The user part ends at the last '@': a password may hold one, percent-encoded or not.
        var hosts = rest
        var userInfo: Substring?
        if let at = rest.lastIndex(of: "@") {
            userInfo = rest[..<at]
            hosts = rest[rest.index(after: at)...]
        }
        guard let userInfo, !userInfo.isEmpty else {
            throw SharedLogError(.invalidArgument, "the PostgreSQL URL names no user: write \(example)")
        }
        if let colon = userInfo.firstIndex(of: ":") {
            user = try Self.decoded(userInfo[..<colon], "user")
            password = try Self.decoded(userInfo[userInfo.index(after: colon)...], "password")
        } else {
            user = try Self.decoded(userInfo, "user")
        }
        guard !user.isEmpty else {
            throw SharedLogError(.invalidArgument, "the PostgreSQL URL names no user: write \(example)")
        }
        servers = []
        for host in hosts.split(separator: ",", omittingEmptySubsequences: false) {
            servers.append(try Self.server(host))
        }
        database = try Self.decoded(path, "database")
        guard !database.isEmpty else {
            throw SharedLogError(.invalidArgument, "the PostgreSQL URL names no database: write \(example)")
        }
        tls = .disable
        for item in query.split(separator: "&") {
            let pair = item.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard pair[0] == "sslmode" else { continue }
            let mode = pair.count > 1 ? try Self.decoded(pair[1], "sslmode") : ""
            guard let parsed = SharedLog.TLSMode(rawValue: mode) else {
                throw SharedLogError(.invalidArgument, "sslmode '\(mode)' is not one of disable, prefer or require")
            }
            tls = parsed
        }
    }

    /// `host`, `host:port`, `[v6]` or `[v6]:port`.
    private static func server(_ text: Substring) throws(SharedLogError) -> SharedLog.Server {
        var host = text
        var port: Substring?
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]") else {
                throw SharedLogError(.invalidArgument, "the PostgreSQL URL's host '\(text)' lacks its closing ']'")
            }
            host = text[text.index(after: text.startIndex)..<close]
            let after = text[text.index(after: close)...]
            if after.hasPrefix(":") {
                port = after.dropFirst()
            } else if !after.isEmpty {
                throw SharedLogError(.invalidArgument, "the PostgreSQL URL's host '\(text)' is malformed")
            }
        } else if let colon = text.lastIndex(of: ":") {
            host = text[..<colon]
            port = text[text.index(after: colon)...]
        }
        guard !host.isEmpty else {
            throw SharedLogError(
                .invalidArgument, "the PostgreSQL URL names no host: write postgres://user@host/database")
        }
        var number = 5432
        if let port {
            guard let value = Int(port), (1...65_535).contains(value) else {
                throw SharedLogError(.invalidArgument, "the PostgreSQL URL's port '\(port)' is not a port number")
            }
            number = value
        }
        return SharedLog.Server(host: String(host), port: number)
    }

    private static func decoded(_ text: Substring, _ what: String) throws(SharedLogError) -> String {
        guard let decoded = String(text).removingPercentEncoding else {
            throw SharedLogError(.invalidArgument, "the PostgreSQL URL's \(what) holds a malformed %-escape")
        }
        return decoded
    }
}
