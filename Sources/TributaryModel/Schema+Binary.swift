extension BinaryWriter {
    public mutating func property(_ property: Property, _ names: inout NameTable) {
        name(property.name, &names)
        kind(property.kind, &names)
        var flags: UInt8 = 0
        if property.isOptional { flags |= 1 }
        if property.isList { flags |= 2 }
        if property.isIndexed { flags |= 4 }
        if property.defaultValue != nil { flags |= 8 }
        if property.isSet { flags |= 0x10 }
        if property.isDictionary { flags |= 0x20 }
        byte(flags)
        if let defaultValue = property.defaultValue { value(defaultValue, &names) }
    }

    /// A property kind: a scalar type's tag, or a link's or embedded object's tag and type name.
    mutating func kind(_ kind: PropertyKind, _ names: inout NameTable) {
        switch kind {
        case .scalar(let type):
            byte(type.rawValue)
        case .link(let target):
            byte(0x40)
            name(target, &names)
        case .embedded(let target):
            byte(0x41)
            name(target, &names)
        }
    }

    /// A property shape in one byte (scalar type 1-8, link 9, embedded 10, decimal 11, float 12, mixed 13; bit 4 optional, bit 5
    /// list, bit 6 set, bit 7 dictionary), then a link's or embedded object's target: what shape notes and the states
    /// records keep aside hold.
    public mutating func shape(_ shape: PropertyShape, _ names: inout NameTable) {
        let flags: UInt8 =
            (shape.isOptional ? 0x10 : 0) | (shape.isList ? 0x20 : 0) | (shape.isSet ? 0x40 : 0)
            | (shape.isDictionary ? 0x80 : 0)
        switch shape.kind {
        case .scalar(.decimal): byte(11 | flags)
        case .scalar(.float): byte(12 | flags)
        case .scalar(.mixed): byte(13 | flags)
        case .scalar(let type): byte(type.rawValue | flags)
        case .link(let target):
            byte(9 | flags)
            name(target, &names)
        case .embedded(let target):
            byte(10 | flags)
            name(target, &names)
        }
    }

    public mutating func objectSchema(_ type: ObjectSchema, _ names: inout NameTable) {
        name(type.name, &names)
        byte(type.isEmbedded ? 1 : 0)
        if !type.isEmbedded { name(type.primaryKey ?? "_id", &names) }
        varint(type.properties.count)
        for property in type.properties { self.property(property, &names) }
    }

    /// Encodes a whole schema, names inline.
    public mutating func schema(_ schema: Schema) {
        var names = NameTable.inline
        varint(schema.version)
        varint(schema.types.count)
        for type in schema.types { objectSchema(type, &names) }
        // Definition stamps follow, sorted, only when there are any (or removals follow): a declared schema encodes
        // as it always did.
        // Losing definitions come last: every section before them is then written.
        // The migrated version comes after them, only when a migration was marked.
        let hasRemovals =
            !schema.propertyRemovals.isEmpty || !schema.typeRemovals.isEmpty || !schema.losingDefinitions.isEmpty
            || schema.migratedVersion > 0
        guard !schema.definitionStamps.isEmpty || hasRemovals else { return }
        varint(schema.definitionStamps.count)
        for (name, stamp) in schema.definitionStamps.sorted(by: { $0.key < $1.key }) {
            self.name(name.type, &names)
            self.name(name.property, &names)
            byte(stamp.kind.rawValue)
            fixed64(stamp.stamp.time.rawValue)
            fixed64(stamp.stamp.replica.rawValue)
        }
        // Then the removals, sorted, only when there are any.
        guard hasRemovals else { return }
        varint(schema.propertyRemovals.count)
        for (name, removals) in schema.propertyRemovals.sorted(by: { $0.key < $1.key }) {
            self.name(name.type, &names)
            self.name(name.property, &names)
            varint(removals.count)
            for removal in removals {
                dot(removal.dot)
                // Flags: bit 0, a rename (its new name and the removals of it it saw follow); bit 1, renames onto
                // the name seen (their list ends the entry). Bit 1 only when there are any, so that a schema without
                // them encodes as it did before they were remembered.
                let ontoFlag: UInt8 = removal.renamesOntoSeen.isEmpty ? 0 : 2
                if let renamedTo = removal.renamedTo {
                    byte(1 | ontoFlag)
                    self.name(renamedTo, &names)
                    varint(removal.removalsOfNewNameSeen.count)
                    for seen in removal.removalsOfNewNameSeen { dot(seen) }
                } else {
                    byte(ontoFlag)
                }
                varint(removal.removalsSeen.count)
                for seen in removal.removalsSeen { dot(seen) }
                if ontoFlag != 0 {
                    varint(removal.renamesOntoSeen.count)
                    for seen in removal.renamesOntoSeen { dot(seen) }
                }
            }
        }
        let typeRemovals = schema.typeRemovals.sorted(by: { $0.key < $1.key })
        varint(typeRemovals.count)
        for (type, removals) in typeRemovals {
            self.name(type, &names)
            varint(removals.count)
            for removal in removals { dot(removal.dot) }
        }
        // Then, only when some type removal saw another (or losing definitions follow), the removals each saw, in the
        // same order: a schema without any encodes as it did before they were remembered.
        let losing = schema.losingDefinitions.sorted(by: { $0.key < $1.key })
        guard
            typeRemovals.contains(where: { $0.value.contains { !$0.removalsSeen.isEmpty } }) || !losing.isEmpty
                || schema.migratedVersion > 0
        else { return }
        for (_, removals) in typeRemovals {
            for removal in removals {
                varint(removal.removalsSeen.count)
                for seen in removal.removalsSeen { dot(seen) }
            }
        }
        // Then, only when there are any, the definitions that lost to another of a different shape.
        guard !losing.isEmpty || schema.migratedVersion > 0 else { return }
        varint(losing.count)
        for (name, definitions) in losing {
            self.name(name.type, &names)
            varint(definitions.count)
            for definition in definitions {
                property(definition.property, &names)
                byte(definition.stamp.kind.rawValue)
                fixed64(definition.stamp.stamp.time.rawValue)
                fixed64(definition.stamp.stamp.replica.rawValue)
            }
        }
        // Then, only when a migration was marked, the version it took the data to.
        guard schema.migratedVersion > 0 else { return }
        varint(schema.migratedVersion)
    }
}

extension BinaryReader {
    public mutating func property(_ names: NameTable) throws(ChangesetDecodingError) -> Property {
        let propertyName = try name(names, "property name")
        let kind = try self.kind(names, of: "property '\(propertyName)'")
        let flags = try byte()
        guard flags & ~0x3F == 0 else { throw error(.invalidValue, "unknown property flags \(flags)") }
        var property = Property(
            propertyName, kind, optional: flags & 1 != 0, list: flags & 2 != 0, set: flags & 0x10 != 0,
            dictionary: flags & 0x20 != 0, indexed: flags & 4 != 0)
        property.isOptional = flags & 1 != 0
        if flags & 8 != 0 { property.defaultValue = try value(names) }
        return property
    }

    /// A property kind, as ``BinaryWriter/kind(_:_:)`` writes it; `what` names its owner in errors.
    mutating func kind(_ names: NameTable, of what: @autoclosure () -> String) throws(ChangesetDecodingError)
        -> PropertyKind
    {
        let tag = try byte()
        switch tag {
        case 0x40: return .link(try name(names, "link target"))
        case 0x41: return .embedded(try name(names, "embedded type"))
        default:
            guard let scalar = ScalarType(rawValue: tag) else {
                throw error(.invalidTag, "unknown property type tag \(tag) for \(what())")
            }
            return .scalar(scalar)
        }
    }

    /// A property shape, as ``BinaryWriter/shape(_:_:)`` writes it.
    public mutating func shape(_ names: NameTable) throws(ChangesetDecodingError) -> PropertyShape {
        let byte = try self.byte()
        let kind: PropertyKind
        switch byte & 0x0F {
        case 9: kind = .link(try name(names, "link target"))
        case 10: kind = .embedded(try name(names, "embedded type"))
        case 11: kind = .scalar(.decimal)
        case 12: kind = .scalar(.float)
        case 13: kind = .scalar(.mixed)
        case let code:
            guard let scalar = ScalarType(rawValue: code), scalar != .decimal, scalar != .float, scalar != .mixed else {
                throw error(.invalidTag, "unknown shape kind \(code)")
            }
            kind = .scalar(scalar)
        }
        return PropertyShape(
            kind: kind, isOptional: byte & 0x10 != 0, isList: byte & 0x20 != 0, isSet: byte & 0x40 != 0,
            isDictionary: byte & 0x80 != 0)
    }

    /// The most properties one type may have in a changeset or a stored schema.
    public static let maximumPropertiesPerType = 10_000

    /// An object type's definition, as a changeset carries it: at most ``maximumPropertiesPerType`` properties.
    public mutating func objectSchema(_ names: NameTable) throws(ChangesetDecodingError) -> ObjectSchema {
        try objectSchema(names, maximumProperties: Self.maximumPropertiesPerType)
    }

    /// An object type's definition with at most `maximumProperties` properties.
    mutating func objectSchema(
        _ names: NameTable, maximumProperties: Int
    ) throws(ChangesetDecodingError) -> ObjectSchema {
        let typeName = try name(names, "type name")
        let embedded = try byte()
        guard embedded <= 1 else { throw error(.invalidValue, "bad embedded flag \(embedded) for type '\(typeName)'") }
        let primaryKey = embedded == 1 ? nil : try name(names, "primary key name")
        let count = try self.count("property", maximum: maximumProperties, minimumBytesEach: 3)
        var properties: [Property] = []
        properties.reserveCapacity(count)
        for _ in 0..<count { properties.append(try property(names)) }
        return ObjectSchema(name: typeName, primaryKey: primaryKey, embedded: embedded == 1, properties: properties)
    }

    /// A whole schema, as a replica stores it. Its counts are bounded by its bytes only: a schema merged from many
    /// changesets, each within a changeset's limits, may hold more types, or more properties on one type, than one
    /// changeset may define, and must read back (a limit here would leave such a replica unable to open).
    public mutating func schema() throws(ChangesetDecodingError) -> Schema {
        let version = try varint()
        let count = try self.count("type", maximum: .max, minimumBytesEach: 3)
        var types: [ObjectSchema] = []
        for _ in 0..<count { types.append(try objectSchema(.inline, maximumProperties: .max)) }
        var schema = Schema(version: version, types: types)
        // A schema stored before definition stamps existed ends here.
        guard !isAtEnd else { return schema }
        let stampCount = try self.count("definition stamp", maximum: .max, minimumBytesEach: 19)
        for _ in 0..<stampCount {
            let type = try name(.inline, "type name")
            let property = try name(.inline, "property name")
            let tag = try byte()
            guard let kind = DefinitionStamp.Kind(rawValue: tag) else {
                throw error(.invalidValue, "unknown definition kind \(tag) for property '\(type).\(property)'")
            }
            let time = HybridTime(rawValue: try fixed64())
            let replica = ReplicaID(rawValue: try fixed64())
            schema.definitionStamps[PropertyName(type: type, property: property)] =
                DefinitionStamp(kind, Stamp(time: time, replica: replica))
        }
        // A schema stored before removals were remembered, or without any, ends here.
        guard !isAtEnd else { return schema }
        let removedProperties = try self.count("removed property", maximum: .max, minimumBytesEach: 3)
        for _ in 0..<removedProperties {
            let type = try name(.inline, "type name")
            let property = try name(.inline, "property name")
            let count = try self.count("removal", maximum: .max, minimumBytesEach: 10)
            var removals: [PropertyRemoval] = []
            for _ in 0..<count {
                let dot = try dot()
                let flag = try byte()
                var removal = PropertyRemoval(dot: dot)
                guard flag & ~3 == 0 else {
                    throw error(.invalidValue, "bad flags \(flag) for a removal of '\(type).\(property)'")
                }
                if flag & 1 != 0 {
                    removal.renamedTo = try name(.inline, "new property name")
                    removal.removalsOfNewNameSeen = try dots("removal of the new name seen by a rename")
                }
                removal.removalsSeen = try dots("earlier removal seen")
                if flag & 2 != 0 { removal.renamesOntoSeen = try dots("rename onto the name seen by a removal") }
                removals.append(removal)
            }
            schema.propertyRemovals[PropertyName(type: type, property: property)] = removals
        }
        let removedTypes = try self.count("removed type", maximum: .max, minimumBytesEach: 2)
        var typeRemovals: [(type: String, dots: [Dot])] = []
        for _ in 0..<removedTypes {
            let type = try name(.inline, "type name")
            typeRemovals.append((type, try dots("type removal")))
        }
        // A schema whose type removals saw none, or stored before they were remembered, ends here.
        let withSeen = !isAtEnd
        for (type, dots) in typeRemovals {
            var removals: [TypeRemoval] = []
            removals.reserveCapacity(dots.count)
            for dot in dots {
                let seen = withSeen ? try self.dots("earlier removal of type '\(type)' seen") : []
                removals.append(TypeRemoval(dot: dot, removalsSeen: seen))
            }
            schema.typeRemovals[type] = removals
        }
        // A schema without losing definitions ends here.
        guard !isAtEnd else { return schema }
        let losingCount = try self.count("property with losing definitions", maximum: .max, minimumBytesEach: 3)
        for _ in 0..<losingCount {
            let type = try name(.inline, "type name")
            let count = try self.count("losing definition", maximum: .max, minimumBytesEach: 20)
            guard count > 0 else { throw error(.invalidValue, "type '\(type)' lists no losing definition") }
            var definitions: [LosingDefinition] = []
            for _ in 0..<count {
                let property = try self.property(.inline)
                let tag = try byte()
                guard let kind = DefinitionStamp.Kind(rawValue: tag) else {
                    throw error(.invalidValue, "unknown definition kind \(tag) for '\(type).\(property.name)'")
                }
                let time = HybridTime(rawValue: try fixed64())
                let replica = ReplicaID(rawValue: try fixed64())
                definitions.append(
                    LosingDefinition(property, DefinitionStamp(kind, Stamp(time: time, replica: replica))))
            }
            let name = PropertyName(type: type, property: definitions[0].property.name)
            guard definitions.allSatisfy({ $0.property.name == name.property }) else {
                throw error(.invalidValue, "losing definitions of '\(name)' name other properties")
            }
            schema.losingDefinitions[name] = definitions
        }
        // A schema without a migration mark ends here.
        guard !isAtEnd else { return schema }
        schema.migratedVersion = try varint()
        return schema
    }

    mutating func dots(_ what: String) throws(ChangesetDecodingError) -> [Dot] {
        let count = try self.count(what, maximum: .max, minimumBytesEach: 9)
        var dots: [Dot] = []
        for _ in 0..<count { dots.append(try dot()) }
        return dots
    }
}
