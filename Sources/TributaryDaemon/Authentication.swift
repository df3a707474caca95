public import Foundation
import JWTKit
import TributaryModel
public import TributaryProtocol

/// How a daemon checks the tokens apps present: JWTs signed with one of its keys.
///
/// The algorithm is pinned per key: a token is verified only with the key its `kid` names (or the only key, when the
/// daemon has one and the token names none), and only if its header's `alg` is that key's algorithm. So a token
/// signed with `none`, or an HMAC token made with an RSA public key as the secret, is refused.
public struct TokenPolicy: Sendable, Hashable {
    /// The keys tokens may be signed with.
    public var keys: [TokenKey]
    /// When set, a token's `iss` must be this.
    public var issuer: String?
    /// When not empty, a token's `aud` must name one of these.
    public var audiences: [String]
    /// How far `exp` and `nbf` may be off, for clocks that differ a little. Default: 30 seconds.
    public var leewaySeconds: Int

    public init(keys: [TokenKey], issuer: String? = nil, audiences: [String] = [], leewaySeconds: Int = 30) {
        self.keys = keys
        self.issuer = issuer
        self.audiences = audiences
        self.leewaySeconds = leewaySeconds
    }
}

/// A key tokens are signed with, and its algorithm.
public struct TokenKey: Sendable, Hashable {
    /// The signature algorithms a daemon verifies.
    public enum Algorithm: String, Sendable, Hashable, CaseIterable {
        /// HMAC with SHA-256: a shared secret.
        case hs256 = "HS256"
        /// RSA PKCS#1 v1.5 with SHA-256: a public key (PEM).
        case rs256 = "RS256"
        /// ECDSA on P-256 with SHA-256: a public key (PEM).
        case es256 = "ES256"
    }

    /// The key's id, matched against a token's `kid`; `nil` for a daemon with one key.
    public var id: String?
    public var algorithm: Algorithm
    /// The secret (HS256) or the public key in PEM (RS256, ES256).
    public var material: String

    public init(id: String? = nil, algorithm: Algorithm, material: String) {
        self.id = id
        self.algorithm = algorithm
        self.material = material
    }

    var name: String { id.map { "key '\($0)' (\(algorithm.rawValue))" } ?? "the \(algorithm.rawValue) key" }
}

/// A value among a token's claims: what permission rules can read about the user.
public enum TokenClaim: Sendable, Hashable, Decodable {
    case string(String)
    case number(Double)
    case bool(Bool)
    case null
    case array([TokenClaim])
    case object([String: TokenClaim])

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Double.self) {
            self = .number(value)
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode([TokenClaim].self) {
            self = .array(value)
        } else {
            self = .object(try container.decode([String: TokenClaim].self))
        }
    }
}

/// Who the other side of a session is, as its credentials said.
public struct SessionIdentity: Sendable, Hashable {
    /// The user (a JWT's `sub`): every changeset the session uploads must name it as its author. `nil` for a session
    /// with no user (a daemon that takes anyone, or a shared access token).
    public var user: String?
    /// The token's claims, `sub` and the registered ones included: the user's custom data.
    public var claims: [String: TokenClaim]
    /// When the token expires; the session ends then with ``SyncError/Code/tokenExpired``.
    public var expires: Date?
    /// The roles the session may take.
    public var roles: Set<SyncRole>

    /// Anyone, in any role: a daemon with neither keys nor access tokens.
    public static let anyone = SessionIdentity(user: nil, claims: [:], expires: nil, roles: [.app, .peer])
    /// A peer daemon, proven by its client certificate.
    public static let peer = SessionIdentity(user: nil, claims: [:], expires: nil, roles: [.peer])
}

extension SessionIdentity {
    /// The user as permission rules see it: `%%user.id` is the token's `sub` (empty without one), and
    /// `%%user.custom_data.<path>` reads the token's `custom_data` claim when it has one, its claims otherwise.
    var ruleUser: RuleUser {
        var data: [String: Value] = [:]
        func flatten(_ claim: TokenClaim, _ path: String) {
            switch claim {
            case .string(let text): data[path] = .string(text)
            case .bool(let bool): data[path] = .bool(bool)
            case .null: data[path] = .null
            case .number(let number):
                data[path] = number.rounded() == number && abs(number) < 9e15 ? .int(Int64(number)) : .double(number)
            case .object(let members):
                for (key, member) in members { flatten(member, path.isEmpty ? key : "\(path).\(key)") }
            case .array: break
            }
        }
        if case .object = claims["custom_data"] {
            flatten(claims["custom_data"]!, "")
        } else {
            flatten(.object(claims), "")
        }
        return RuleUser(id: user ?? "", customData: data)
    }
}

/// Checks the bearer token of a connection before its WebSocket upgrade.
struct Authenticator: Sendable {
    let accessTokens: Set<String>
    let policy: TokenPolicy?
    /// Whether peer daemons prove themselves with certificates (TLS with a peer certificate authority): no token then
    /// allows a peer session.
    let peersByCertificate: Bool
    private let verifiers: [(key: TokenKey, keys: JWTKeyCollection)]

    /// - Throws: ``SyncServerError`` naming a key that does not load.
    init(accessTokens: [String], policy: TokenPolicy?, peersByCertificate: Bool = false) async throws(SyncServerError) {
        self.accessTokens = Set(accessTokens)
        self.policy = policy
        self.peersByCertificate = peersByCertificate
        var verifiers: [(TokenKey, JWTKeyCollection)] = []
        for key in policy?.keys ?? [] {
            let collection = JWTKeyCollection()
            do {
                switch key.algorithm {
                case .hs256:
                    guard key.material.utf8.count >= 32 else {
                        throw SyncServerError(
                            "\(key.name): an HS256 secret needs at least 32 bytes (256 bits), this one has "
                                + "\(key.material.utf8.count)")
                    }
                    await collection.add(hmac: HMACKey(from: key.material), digestAlgorithm: .sha256)
                case .rs256:
                    await collection.add(rsa: try Insecure.RSA.PublicKey(pem: key.material), digestAlgorithm: .sha256)
                case .es256:
                    await collection.add(ecdsa: try ES256PublicKey(pem: key.material))
                }
            } catch let error as SyncServerError {
                throw error
            } catch {
                throw SyncServerError("\(key.name) does not load: \(error) (give the public key in PEM)")
            }
            verifiers.append((key, collection))
        }
        if let policy, policy.keys.count > 1, policy.keys.contains(where: { $0.id == nil }) {
            throw SyncServerError("with several token keys, give each an id (the kid tokens name)")
        }
        self.verifiers = verifiers
    }

    /// Whether the daemon takes sessions without a token.
    var isOpen: Bool { accessTokens.isEmpty && verifiers.isEmpty }

    /// The identity `authorization` (an HTTP `Authorization` header's value) proves, or why it proves none.
    func authenticate(_ authorization: String?, now: Date = Date()) async -> Result<SessionIdentity, SyncError> {
        let shared = SessionIdentity(
            user: nil, claims: [:], expires: nil, roles: peersByCertificate ? [.app] : [.app, .peer])
        if isOpen { return .success(shared) }
        guard let authorization, authorization.lowercased().hasPrefix("bearer ") else {
            return .failure(
                refusal(
                    "this daemon requires a token: present it as Authorization: Bearer TOKEN "
                        + "(SyncCredentials.token or .refreshing)"))
        }
        let token = authorization.dropFirst("bearer ".count).trimmingCharacters(in: .whitespaces)
        if accessTokens.contains(token) { return .success(shared) }
        guard let policy, !verifiers.isEmpty else {
            return .failure(refusal("the token is not one of the daemon's access tokens"))
        }
        return await verify(token, policy: policy, now: now)
    }

    private func verify(_ token: String, policy: TokenPolicy, now: Date) async -> Result<SessionIdentity, SyncError> {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let header = Self.decodeJSON(parts[0]) else {
            return .failure(
                refusal(
                    "the token is neither one of the daemon's access tokens nor a JWT (three base64url parts, the "
                        + "first a JSON header)"))
        }
        let algorithm = header["alg"] as? String ?? "(none)"
        let kid = header["kid"] as? String
        let candidates = verifiers.filter { kid == nil ? verifiers.count == 1 : $0.key.id == kid }
        guard let (key, keys) = candidates.first else {
            return .failure(
                refusal(
                    kid.map { "the token names key id '\($0)', which the daemon does not have" }
                        ?? "the token names no key id (kid), and the daemon has several keys"))
        }
        guard algorithm == key.algorithm.rawValue else {
            return .failure(
                refusal(
                    "the token is signed with \(algorithm), but \(key.name) takes \(key.algorithm.rawValue) only"))
        }
        let payload: TokenPayload
        do {
            payload = try await keys.verify(token, as: TokenPayload.self)
        } catch {
            return .failure(refusal("the token's signature does not verify with \(key.name)"))
        }
        let leeway = TimeInterval(policy.leewaySeconds)
        if let expires = payload.expires, expires.addingTimeInterval(leeway) <= now {
            return .failure(
                SyncError(
                    .tokenExpired, .retry,
                    "the token expired at \(expires.formatted(.iso8601)): present a fresh one"))
        }
        if let notBefore = payload.notBefore, notBefore.addingTimeInterval(-leeway) > now {
            return .failure(
                SyncError(
                    .unauthorized, .retry,
                    "the token is not valid before \(notBefore.formatted(.iso8601)) (is a clock wrong?)",
                    retryAfterSeconds: UInt64(max(1, min(3600, notBefore.timeIntervalSince(now))))))
        }
        if let issuer = policy.issuer, payload.issuer != issuer {
            return .failure(
                refusal("the token's issuer is \(payload.issuer.map { "'\($0)'" } ?? "missing"), not '\(issuer)'"))
        }
        if !policy.audiences.isEmpty, !payload.audiences.contains(where: policy.audiences.contains) {
            return .failure(
                refusal(
                    "the token's audience (\(payload.audiences.joined(separator: ", "))) names none of the daemon's "
                        + "(\(policy.audiences.joined(separator: ", ")))"))
        }
        guard let user = payload.subject, !user.isEmpty else {
            return .failure(refusal("the token names no user: its sub claim is missing or empty"))
        }
        return .success(SessionIdentity(user: user, claims: payload.claims, expires: payload.expires, roles: [.app]))
    }

    private func refusal(_ message: String) -> SyncError { SyncError(.unauthorized, .fatal, message) }

    /// A base64url JSON object (a JWT's header), or `nil`.
    private static func decodeJSON(_ part: Substring) -> [String: Any]? {
        var text = part.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while text.count % 4 != 0 { text += "=" }
        guard let data = Data(base64Encoded: text) else { return nil }
        return (try? JSONSerialization.jsonObject(with: data)) as? [String: Any]
    }
}

/// A token's payload: the registered claims the daemon checks, and every claim as the user's data.
private struct TokenPayload: JWTPayload {
    var subject: String?
    var issuer: String?
    var audiences: [String]
    var expires: Date?
    var notBefore: Date?
    var claims: [String: TokenClaim]

    private struct Key: CodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: Key.self)
        var claims: [String: TokenClaim] = [:]
        for key in container.allKeys { claims[key.stringValue] = try container.decode(TokenClaim.self, forKey: key) }
        self.claims = claims
        func string(_ name: String) -> String? {
            if case .string(let value) = claims[name] { return value }
            return nil
        }
        func date(_ name: String) -> Date? {
            if case .number(let seconds) = claims[name] { return Date(timeIntervalSince1970: seconds) }
            return nil
        }
        subject = string("sub")
        issuer = string("iss")
        expires = date("exp")
        notBefore = date("nbf")
        switch claims["aud"] {
        case .string(let value): audiences = [value]
        case .array(let values):
            audiences = values.compactMap {
                if case .string(let value) = $0 { return value }
                return nil
            }
        default: audiences = []
        }
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: Key.self)
        if let subject { try container.encode(subject, forKey: Key(stringValue: "sub")) }
    }

    /// The claims are checked by ``Authenticator``, with the daemon's leeway and policy, after the signature.
    func verify(using algorithm: some JWTAlgorithm) async throws {}
}

/// A daemon configuration that cannot be used, with what to change.
public struct SyncServerError: Error, Sendable, CustomStringConvertible {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}
