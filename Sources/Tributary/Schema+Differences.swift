public import TributaryModel

extension Schema {
    /// The changes that turn `stored` into this schema, one sentence each, in the words of Realm's "Migration is
    /// required" message: `Property 'Project.isPinned' has been added.`
    public func differences(from stored: Schema) -> [String] {
        var lines: [String] = []
        for old in stored.types where self[type: old.name] == nil {
            lines.append("Class '\(old.name)' has been removed.")
        }
        for new in types {
            guard let old = stored[type: new.name] else {
                lines.append("Class '\(new.name)' has been added.")
                continue
            }
            if old.isEmbedded != new.isEmbedded {
                lines.append(
                    "Class '\(new.name)' has been changed from \(old.isEmbedded ? "embedded" : "top-level") to \(new.isEmbedded ? "embedded" : "top-level")."
                )
            }
            if old.primaryKey != new.primaryKey {
                lines.append(
                    "Primary key of '\(new.name)' has been changed from '\(old.primaryKey ?? "none")' to '\(new.primaryKey ?? "none")'."
                )
            }
            for property in old.properties where new[property: property.name] == nil {
                lines.append("Property '\(new.name).\(property.name)' has been removed.")
            }
            for property in new.properties {
                let name = "'\(new.name).\(property.name)'"
                guard let previous = old[property: property.name] else {
                    lines.append("Property \(name) has been added.")
                    continue
                }
                if previous.kind != property.kind || previous.isList != property.isList
                    || previous.isDictionary != property.isDictionary
                {
                    lines.append(
                        "Property \(name) has been changed from '\(previous.typeDescription)' to '\(property.typeDescription)'."
                    )
                } else if previous.isOptional != property.isOptional {
                    lines.append("Property \(name) has been made \(property.isOptional ? "optional" : "required").")
                }
                if previous.isIndexed != property.isIndexed {
                    lines.append("Property \(name) has been made \(property.isIndexed ? "indexed" : "unindexed").")
                }
                if !Property.defaultsStoreAlike(previous.defaultValue, property.defaultValue) {
                    lines.append("Default value of \(name) has been changed.")
                }
            }
        }
        return lines
    }

    /// Whether every type and property of this schema is in `other`, defined the same way (`other` may have more);
    /// defaults are compared as they store (`Property/storesAlike(_:)`).
    public func isSubset(of other: Schema) -> Bool {
        types.allSatisfy { type in
            guard let stored = other[type: type.name], stored.isEmbedded == type.isEmbedded,
                stored.primaryKey == type.primaryKey
            else { return false }
            return type.properties.allSatisfy { stored[property: $0.name]?.storesAlike($0) ?? false }
        }
    }

    /// Whether two schemas define the same types and properties (property order aside).
    public func isEquivalent(to other: Schema) -> Bool { differences(from: other).isEmpty }
}

extension Property {
    /// Whether two definitions are one once stored: equal, but for defaults that store alike. A date default read back
    /// from a stored schema can differ in its last bit from the one the app declares (`Value/storesAlike(_:)`), and
    /// must not make the same declaration a change.
    func storesAlike(_ other: Property) -> Bool {
        guard Self.defaultsStoreAlike(defaultValue, other.defaultValue) else { return false }
        var mine = self
        var theirs = other
        mine.defaultValue = nil
        theirs.defaultValue = nil
        return mine == theirs
    }

    /// Whether two defaults (or their absence) store alike.
    static func defaultsStoreAlike(_ a: Value?, _ b: Value?) -> Bool {
        switch (a, b) {
        case (nil, nil): return true
        case (let a?, let b?): return a.storesAlike(b)
        default: return false
        }
    }
}
