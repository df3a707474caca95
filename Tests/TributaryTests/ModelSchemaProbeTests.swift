import Foundation
import Testing
import TributaryModel
import TributaryTestSupport

@testable import Tributary

/// A model whose decoder validates what it reads.
struct Subscriber: Model {
    var _id: String
    var email: String
    var name: String
    var joined: Date

    struct InvalidEmail: Error {}

    init(_id: String, email: String, name: String, joined: Date) {
        self._id = _id
        self.email = email
        self.name = name
        self.joined = joined
    }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        _id = try container.decode(String.self, forKey: ._id)
        email = try container.decode(String.self, forKey: .email)
        if decoder.userInfo[.tributarySchemaProbe] as? Bool != true, !email.contains("@") { throw InvalidEmail() }
        name = try container.decode(String.self, forKey: .name)
        joined = try container.decode(Date.self, forKey: .joined)
    }
}

/// The same model, validating without looking at the probe flag.
struct StrictSubscriber: Model {
    var _id: String
    var email: String
    var name: String

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        _id = try container.decode(String.self, forKey: ._id)
        email = try container.decode(String.self, forKey: .email)
        if !email.contains("@") { throw Subscriber.InvalidEmail() }
        name = try container.decode(String.self, forKey: .name)
    }
}

@Suite("Schemas of models whose decoders validate")
struct ModelSchemaProbeTests {
    @Test("A decoder that throws partway fails the schema, naming what it read, rather than dropping the rest")
    func throwingDecoderFails() {
        #expect {
            _ = try Schema(models: [StrictSubscriber.self])
        } throws: { error in
            guard let error = error as? TributaryError, error.code == .schemaMismatch else { return false }
            return error.message.contains("StrictSubscriber") && error.message.contains("_id, email")
                && error.message.contains("tributarySchemaProbe")
        }
    }

    @Test("A decoder that skips validation for the probe gets every property, and still validates real data")
    func probeFlagGivesTheWholeSchema() throws {
        let schema = try Schema(models: [Subscriber.self])
        #expect(schema[type: "Subscriber"]?.properties.map(\.name).sorted() == ["_id", "email", "joined", "name"])
        let directory = TemporaryDirectory()
        var configuration = Replica.Configuration()
        configuration.durability = .none
        let replica = try Replica.open(
            directory: directory.path, models: [Subscriber.self], configuration: configuration)
        let joined = Date(timeIntervalSince1970: 1_700_000_000)
        try replica.write { try $0.create(Subscriber(_id: "s1", email: "a@b.c", name: "Ann", joined: joined)) }
        let read = try #require(try replica.read { try $0.object(Subscriber.self, primaryKey: "s1") })
        #expect(read.name == "Ann" && read.joined == joined)
        try replica.write {
            try $0.create("Subscriber", ["_id": "s2", "email": "nope", "name": "Bo", "joined": Value.date(joined)])
        }
        #expect(throws: (any Error).self) { try replica.read { try $0.object(Subscriber.self, primaryKey: "s2") } }
    }
}
