import Foundation
import Testing
import TributaryModel
import TributaryViews

/// Index keys fit LMDB's 511-byte key limit whatever the names, values and primary keys: a string, data or link value
/// keeps what its index's budget leaves room for (`KeyEncoding.indexValueBudget`), and a property whose names leave
/// no room has no budget. What a replica does with such keys is in TributaryTests' IndexKeyLimitTests.
@Suite("Index key budgets")
struct IndexKeyBudgetTests {
    /// A name of `count` bytes that starts with `start`.
    static func name(_ start: String, _ count: Int) -> String {
        start + String(repeating: "x", count: count - start.utf8.count)
    }

    @Test("Every index key fits, for every primary key type, name lengths and worst-case values")
    func budgetsBoundEveryKey() throws {
        let keys: [(ScalarType, PrimaryKey)] = [
            (.string, .string(String(repeating: "\u{7F}", count: KeyEncoding.maximumPrimaryKeyBytes))),
            (.int, .int(-1)), (.uuid, .uuid(UUID())),
            (.objectId, .objectId(ObjectID(bytes: [UInt8](repeating: 0, count: 12))!)),
        ]
        let values: [Value] = [
            .null, .bool(true), .int(.min), .double(-0.5), .date(Date()), .uuid(UUID()),
            .objectId(ObjectID(bytes: [UInt8](repeating: 0, count: 12))!),
            .string(String(repeating: "\u{0}", count: 300)),
            .string(String(repeating: "é", count: 300)), .data(Data(repeating: 0, count: 500)),
            .data(Data(repeating: 1, count: 500)), .link(keys[0].1),
        ]
        var indexable = 0
        for (keyType, key) in keys {
            for typeLength in stride(from: 1, through: 200, by: 7) {
                for propertyLength in stride(from: 1, through: 200, by: 11) {
                    let type = Self.name("T", typeLength)
                    let property = Self.name("p", propertyLength)
                    guard let budget = KeyEncoding.indexValueBudget(type: type, property: property, primaryKey: keyType)
                    else {
                        continue
                    }
                    indexable += 1
                    for value in values {
                        var bytes = ViewStore.indexPrefix(type: type, property: property)
                        KeyEncoding.appendIndexValue(value, budget: budget, to: &bytes)
                        KeyEncoding.append(key, to: &bytes)
                        #expect(
                            bytes.count <= KeyEncoding.maximumKeyBytes,
                            "\(type.count) \(property.count) \(keyType) \(value)")
                    }
                }
            }
        }
        #expect(indexable > 0)
        // A zero byte is escaped to two bytes, and the pair is never split.
        var bytes: [UInt8] = []
        KeyEncoding.appendIndexValue(.data(Data([1, 0, 0])), budget: 4, to: &bytes)
        #expect(bytes == [9, 1, 0, 0xFF, 0, 0])
    }
}
