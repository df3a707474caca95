import Testing
import TributaryMerge
import TributaryModel

/// A field table behaves as a dictionary of field states whose iteration is sorted by name, whatever order the
/// fields were written in: the record encoding depends on that order.
@Suite struct FieldTableTests {
    static func state(_ number: Int64) -> FieldState {
        .register(Register(value: .scalar(.int(number)), stamp: .zero))
    }

    /// Random sets, removals and in-place changes, against a dictionary; small and large tables (the table changes
    /// how it searches past eight names).
    @Test(arguments: [5, 40])
    func behavesAsASortedDictionary(names: Int) {
        var generator = SplitMix64(seed: UInt64(names))
        var table = FieldTable()
        var model: [String: FieldState] = [:]
        for step in 0..<4_000 {
            let name = "f\(generator.next() % UInt64(names))"
            switch generator.next() % 4 {
            case 0:
                table[name] = Self.state(Int64(step))
                model[name] = Self.state(Int64(step))
            case 1:
                let removed = table.removeValue(forKey: name)
                #expect(removed == model.removeValue(forKey: name))
            case 2:
                // In place, through the modify accessor: a missing field is created, a present one changed.
                func bump(_ field: inout FieldState?) {
                    if case .register(var register)? = field {
                        register.addend += 1
                        field = .register(register)
                    } else {
                        field = Self.state(-1)
                    }
                }
                bump(&table[name])
                bump(&model[name])
            default:
                func drop(_ field: inout FieldState?) { field = nil }
                drop(&table[name])
                drop(&model[name])
            }
            #expect(table[name] == model[name])
        }
        #expect(table.count == model.count)
        #expect(table.names == model.keys.sorted())
        #expect(table.map(\.key) == model.keys.sorted())
        #expect(Array(table.states) == model.keys.sorted().map { model[$0]! })
        #expect(table == FieldTable(model))
    }

    @Test func appendInOrderRefusesNamesOutOfOrder() {
        var table = FieldTable()
        let appended = [
            table.appendInOrder("a", Self.state(1)), table.appendInOrder("b", Self.state(2)),
            table.appendInOrder("b", Self.state(3)), table.appendInOrder("B", Self.state(4)),
        ]
        #expect(appended == [true, true, false, false])
        #expect(table.names == ["a", "b"])
        #expect(table["b"] == Self.state(2))
    }

    /// A record whose encoding lists its fields out of order still decodes, and encodes again sorted; a field named
    /// twice is refused.
    @Test func recordsDecodeFieldsInAnyOrderButEachOnce() throws {
        let record = ObjectRecord(exists: true, fields: ["alpha": Self.state(1), "beta": Self.state(2)])
        let bytes = record.encoded()
        let alpha = Array("alpha".utf8)
        let beta = Array("beta".utf8)
        guard let alphaAt = bytes.firstRange(of: alpha)?.lowerBound, let betaAt = bytes.firstRange(of: beta)?.lowerBound
        else {
            Issue.record("field names not found in the encoding")
            return
        }
        // Each field: length byte, name, then its state up to the next field's length byte.
        let first = Array(bytes[(alphaAt - 1)..<(betaAt - 1)])
        let second = Array(bytes[(betaAt - 1)...])
        let prefix = Array(bytes[..<(alphaAt - 1)])
        let swapped = prefix + second + first
        let decoded = try ObjectRecord(decoding: swapped)
        #expect(decoded == record)
        #expect(decoded.encoded() == bytes)

        // The second copy is named as soon as its name is read, before its state: where the decoder always named it.
        let twice = prefix + first + first
        let error = #expect(throws: ChangesetDecodingError.self) { try ObjectRecord(decoding: twice) }
        #expect(error?.code == .invalidValue)
        #expect(error?.offset == prefix.count + first.count + 1 + alpha.count)
        #expect(error?.description.contains("field 'alpha' appears twice") == true)
    }

    /// Names beyond ASCII (composed and decomposed accents, the Kelvin sign, which equals "K" as a `String`) sort as
    /// `String` orders them, which is the order the record encoding has always stored.
    @Test func namesSortAsStringsOrderThem() throws {
        let names = ["b", "a", "B", "aa", "\u{E9}", "e\u{301}x", "z", "\u{212A}", "_id", "\u{1F600}"]
        var table = FieldTable()
        for (index, name) in names.enumerated() { table[name] = Self.state(Int64(index)) }
        let sorted = Set(names).sorted()
        #expect(table.names == sorted)
        // In the encoding, each name follows its length byte; they appear in table order.
        let bytes = ObjectRecord(exists: true, fields: table).encoded()
        var last = -1
        for name in table.names {
            let at = try #require(bytes.firstRange(of: [UInt8(name.utf8.count)] + Array(name.utf8))?.lowerBound)
            #expect(at > last, "\(name) out of order")
            last = at
        }
        #expect(try ObjectRecord(decoding: bytes).fields == table)
    }

    /// The modify accessor writes back what its body left, also when the body throws (the merge engine's writes, which
    /// change fields through it, check everything before they change anything).
    @Test func modifyKeepsWhatTheBodyLeftWhenItThrows() {
        struct Stop: Error {}
        var table: FieldTable = ["a": Self.state(1)]
        func setThenThrow(_ field: inout FieldState?) throws {
            field = Self.state(42)
            throw Stop()
        }
        #expect(throws: Stop.self) { try setThenThrow(&table["a"]) }
        #expect(table["a"] == Self.state(42))
        func removeThenThrow(_ field: inout FieldState?) throws {
            field = nil
            throw Stop()
        }
        #expect(throws: Stop.self) { try removeThenThrow(&table["a"]) }
        #expect(table.isEmpty)
    }
}
