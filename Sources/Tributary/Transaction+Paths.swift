import TributaryMerge
public import TributaryModel

extension Transaction {
    /// A property found by following a ``PropertyPath``: the instruction path to it, its definition and state.
    struct ResolvedPath {
        var fieldPath: FieldPath
        var property: Property
        var field: FieldState?
    }

    /// Follows `path` from an object, through embedded objects, list positions and dictionary keys, to a property.
    func resolve(_ type: String, _ key: PrimaryKey, _ path: PropertyPath) throws -> ResolvedPath {
        var objectType = try working.schema.requireType(type)
        guard let record = try record(type, key), record.exists else {
            throw TributaryError(.objectNotFound, "\(type) \(key) does not exist")
        }
        var fields = record.fields
        var steps: [EmbeddedStep] = []
        var described = "\(type)[\(key)]"
        var index = 0
        while true {
            guard index < path.count, case .property(let name) = path[index] else {
                throw TributaryError(.invalidPath, "path \(describe(path)) must name a property at step \(index + 1)")
            }
            guard let property = objectType[property: name] else {
                throw TributaryError(
                    .unknownProperty, "'\(objectType.name).\(name)' is not a property of \(objectType.name)")
            }
            described += ".\(name)"
            if index == path.count - 1 {
                // Checked here, so that the write is refused alone; the merge would refuse the whole transaction.
                guard name != objectType.primaryKey else {
                    throw TributaryError(.invalidValue, "\(described) is the primary key, which cannot change")
                }
                return ResolvedPath(
                    fieldPath: FieldPath(type: type, primaryKey: key, steps: steps, property: name),
                    property: property, field: fields[name])
            }
            guard case .embedded(let childTypeName) = property.kind, let childType = working.schema[type: childTypeName]
            else {
                throw TributaryError(
                    .invalidPath, "\(described) is \(property.typeDescription); a path cannot go into it")
            }
            var child: EmbeddedState
            if property.isList {
                guard index + 2 < path.count, case .index(let position) = path[index + 1] else {
                    throw TributaryError(
                        .invalidPath, "\(described) is a list: give an element index before a property")
                }
                let elements = list(fields[name]).orderedElements()
                guard elements.indices.contains(position), case .embedded(let found) = elements[position].value else {
                    throw TributaryError(
                        .invalidPath, "\(described) has \(elements.count) elements; index \(position) is out of range")
                }
                child = found
                described += "[\(position)]"
                index += 2
            } else if property.isDictionary {
                guard index + 2 < path.count, case .property(let entryKey) = path[index + 1] else {
                    throw TributaryError(
                        .invalidPath, "\(described) is a dictionary: give a key before a property")
                }
                guard case .dictionary(let dictionary)? = fields[name],
                    case .embedded(let found)? = dictionary.entries[entryKey]?.value
                else {
                    throw TributaryError(
                        .invalidPath,
                        "\(described)['\(entryKey)'] holds no embedded object; write one under the key first")
                }
                child = found
                described += "['\(entryKey)']"
                index += 2
            } else {
                guard case .register(let register)? = fields[name], case .embedded(let found) = register.value else {
                    throw TributaryError(.invalidPath, "\(described) is null; set an embedded object there first")
                }
                child = found
                index += 1
            }
            steps.append(EmbeddedStep(property: name, id: child.id))
            fields = child.fields
            objectType = childType
        }
    }

    func list(_ field: FieldState?) -> ListState {
        if case .list(let list)? = field { return list }
        return ListState()
    }

    func describe(_ path: PropertyPath) -> String {
        path.map(\.description).joined(separator: ".")
    }

    /// The list at `path` and its elements as the app reads them (see ``visibleElements(_:of:)``): positions in the
    /// list API count these.
    func resolveList(_ type: String, _ key: PrimaryKey, _ path: PropertyPath) throws -> (ResolvedPath, [ListElement]) {
        let resolved = try resolveListPath(type, key, path)
        return (resolved, try visibleElements(list(resolved.field), of: resolved.property))
    }

    /// The list property at `path`, without reading its elements.
    func resolveListPath(_ type: String, _ key: PrimaryKey, _ path: PropertyPath) throws -> ResolvedPath {
        let resolved = try resolve(type, key, path)
        guard resolved.property.isList else {
            throw TributaryError(
                .invalidPath, "\(resolved.fieldPath) is \(resolved.property.typeDescription), not a list")
        }
        return resolved
    }

    /// A list's elements in order, as a read gives them: for a list of links, without the links to objects that do
    /// not exist (rule 7). Those stay in the list, hidden, and come back if their target is created again; an edit
    /// at a position never touches them.
    func visibleElements(_ list: ListState, of property: Property) throws -> [ListElement] {
        let elements = list.orderedElements()
        guard case .link(let target) = property.kind else { return elements }
        return try elements.filter { element in
            guard case .scalar(.link(let key)) = element.value else { return true }
            return try record(target, key)?.exists ?? false
        }
    }

    /// Where an insertion at `index` of the list as read (`visible`, from ``visibleElements(_:of:)``) goes: right
    /// after the element read before it, so that hidden links do not shift it.
    func insertionAnchor(_ list: ListState, visible: [ListElement], at index: Int) -> ListAnchor {
        let ordered = list.orderedElements()
        guard visible.count != ordered.count, index > 0, index <= visible.count else {
            return list.anchor(forInsertionAt: index)
        }
        let before = visible[index - 1].id
        let position = (ordered.firstIndex { $0.id == before } ?? ordered.count - 1) + 1
        return list.anchor(forInsertionAt: position)
    }

    func checkElement(_ value: Value, _ resolved: ResolvedPath) throws {
        if let problem = working.schema.problem(with: .list([value]), for: resolved.property) {
            throw TributaryError(.wrongType, "element of \(resolved.fieldPath): \(problem)")
        }
        try checkLinkTargets(.list([value]), resolved.property)
    }

    func checkIndex(_ index: Int, _ count: Int, _ resolved: ResolvedPath, allowEnd: Bool = false) throws {
        let upper = allowEnd ? count : count - 1
        guard index >= 0, index <= upper else {
            throw TributaryError(
                .invalidPath, "index \(index) is out of range for \(resolved.fieldPath), which has \(count) elements")
        }
    }

    // MARK: Properties

    /// Sets one property, possibly inside embedded objects: `["address", "city"]`, `["tasks", 2, "done"]`.
    /// Setting a list property replaces the elements this replica has seen; concurrent inserts elsewhere survive.
    public func set(_ value: Value, at path: PropertyPath, of type: String, primaryKey: PrimaryKey) throws {
        let resolved = try resolve(type, primaryKey, path)
        if let problem = working.schema.problem(with: value, for: resolved.property) {
            throw TributaryError(.wrongType, "\(resolved.fieldPath): \(problem)")
        }
        try checkLinkTargets(value, resolved.property)
        try emit(.set(resolved.fieldPath, value))
    }

    /// Adds `delta` to an integer property. Concurrent increments on other replicas all count (docs/MergeSemantics.md,
    /// rule 4).
    ///
    /// A property that holds no value yet (an object created before the property was added) counts from its
    /// default. An optional property that is null cannot be incremented: set a number first.
    public func increment(_ path: PropertyPath, of type: String, primaryKey: PrimaryKey, by delta: Int64) throws {
        let resolved = try resolve(type, primaryKey, path)
        guard case .scalar(.int) = resolved.property.kind, !resolved.property.isList else {
            throw TributaryError(
                .wrongType,
                "cannot increment \(resolved.fieldPath): it is \(resolved.property.typeDescription), not int")
        }
        guard ObjectRecord.value(resolved.field, of: resolved.property, in: working.schema) != .null else {
            throw TributaryError(
                .invalidValue, "cannot increment \(resolved.fieldPath): it is null; set a number first")
        }
        var base = Stamp.zero
        if case .register(let register)? = resolved.field { base = register.stamp }
        try emit(.addInteger(resolved.fieldPath, delta: delta, base: base))
    }

    // MARK: Dictionaries

    /// Sets one key of a dictionary property (Realm's `map["key"] = value`), possibly inside embedded objects: the
    /// property's other keys are left as they are, and a concurrent write of another key on another replica stays
    /// (docs/MergeSemantics.md, rule 1, key by key).
    ///
    /// ```swift
    /// try txn.setValue("dark", forKey: "theme", in: ["settings"], of: "Profile", primaryKey: "ada")
    /// ```
    public func setValue(
        _ value: Value, forKey key: String, in path: PropertyPath, of type: String, primaryKey: PrimaryKey
    ) throws {
        let resolved = try resolveDictionary(type, primaryKey, path, key: key)
        if let problem = working.schema.problem(with: .dictionary([key: value]), for: resolved.property) {
            throw TributaryError(.wrongType, "\(resolved.fieldPath)['\(key)']: \(problem)")
        }
        try checkLinkTargets(.dictionary([key: value]), resolved.property)
        try emit(.dictionarySet(resolved.fieldPath, key: key, value: value))
    }

    /// Removes one key of a dictionary property (Realm's `map.removeObject(for:)`), when this replica holds it: a
    /// concurrent set of the key on another replica wins if it was made later (rule 1). A key this replica does
    /// not hold writes nothing.
    public func removeValue(forKey key: String, in path: PropertyPath, of type: String, primaryKey: PrimaryKey) throws {
        let resolved = try resolveDictionary(type, primaryKey, path, key: key)
        guard case .dictionary(let dictionary)? = resolved.field, dictionary.entries[key]?.value != nil else { return }
        try emit(.dictionaryErase(resolved.fieldPath, key: key))
    }

    /// The dictionary property at `path`, checked to be one, with `key` checked as a key.
    func resolveDictionary(_ type: String, _ primaryKey: PrimaryKey, _ path: PropertyPath, key: String) throws
        -> ResolvedPath
    {
        let resolved = try resolve(type, primaryKey, path)
        guard resolved.property.isDictionary else {
            throw TributaryError(
                .invalidPath, "\(resolved.fieldPath) is \(resolved.property.typeDescription), not a dictionary")
        }
        if let problem = Property.dictionaryKeyProblem(key) { throw TributaryError(.invalidValue, problem) }
        return resolved
    }

    // MARK: Lists

    /// Inserts `value` into a list at `index` (0 ... count).
    public func insert(_ value: Value, at index: Int, into path: PropertyPath, of type: String, primaryKey: PrimaryKey)
        throws
    {
        try insert(contentsOf: [value], at: index, into: path, of: type, primaryKey: primaryKey)
    }

    /// Inserts `values` into a list at `index` (0 ... count), in order: the first at `index`, each next one after it.
    ///
    /// One call reads the list once, however many values it inserts: prefer it to inserting values one at a time,
    /// which reads the list for each. Every value is checked before any is written.
    public func insert(
        contentsOf values: [Value], at index: Int, into path: PropertyPath, of type: String, primaryKey: PrimaryKey
    ) throws {
        let (resolved, elements) = try resolveList(type, primaryKey, path)
        try insert(contentsOf: values, at: index, resolved, elements)
    }

    /// Appends `value` to a list.
    public func append(_ value: Value, to path: PropertyPath, of type: String, primaryKey: PrimaryKey) throws {
        try append(contentsOf: [value], to: path, of: type, primaryKey: primaryKey)
    }

    /// Appends `values` to a list, in order. One call reads the list once, however many values it appends.
    public func append(contentsOf values: [Value], to path: PropertyPath, of type: String, primaryKey: PrimaryKey)
        throws
    {
        let (resolved, elements) = try resolveList(type, primaryKey, path)
        try insert(contentsOf: values, at: elements.count, resolved, elements)
    }

    private func insert(contentsOf values: [Value], at index: Int, _ resolved: ResolvedPath, _ elements: [ListElement])
        throws
    {
        try checkIndex(index, elements.count, resolved, allowEnd: true)
        for value in values { try checkElement(value, resolved) }
        guard !values.isEmpty else { return }
        // Right after the slot of the element read before `index`, so that hidden links do not shift it.
        try emitInserts(
            values[...], after: index > 0 ? elements[index - 1].position : nil,
            plan: ListInsertionPlan(list(resolved.field)), at: resolved.fieldPath)
    }

    /// Inserts `values` in order into the list at `path`: the first right after slot `left` (at the front when `nil`),
    /// each next one right after the one before, where `plan` (made from the list before these inserts) places them.
    func emitInserts(_ values: ArraySlice<Value>, after left: ElementID?, plan: ListInsertionPlan, at path: FieldPath)
        throws
    {
        var left = left
        for value in values {
            let instruction = instructions.count
            try emit(.listInsert(path, anchor: plan.anchor(after: left), value: value))
            // The id the merge engine gives the element (the first it draws for the instruction), which is also the
            // id of the slot it creates.
            left = ElementID(dot: info.dot, instruction: instruction)
        }
    }

    /// Replaces the value of the element at `index`.
    public func replaceElement(
        at index: Int, with value: Value, in path: PropertyPath, of type: String, primaryKey: PrimaryKey
    ) throws {
        let (resolved, elements) = try resolveList(type, primaryKey, path)
        try checkIndex(index, elements.count, resolved)
        try checkElement(value, resolved)
        try emit(.listSet(resolved.fieldPath, element: elements[index].id, value: value))
    }

    /// Removes the element at `index`.
    public func removeElement(at index: Int, from path: PropertyPath, of type: String, primaryKey: PrimaryKey) throws {
        let (resolved, elements) = try resolveList(type, primaryKey, path)
        try checkIndex(index, elements.count, resolved)
        try emit(.listErase(resolved.fieldPath, element: elements[index].id))
    }

    /// Moves the element at `source` so that it ends at index `destination` (both in 0 ..< count).
    public func moveElement(
        from source: Int, to destination: Int, in path: PropertyPath, of type: String, primaryKey: PrimaryKey
    ) throws {
        let (resolved, elements) = try resolveList(type, primaryKey, path)
        try checkIndex(source, elements.count, resolved)
        try checkIndex(destination, elements.count, resolved)
        guard source != destination else { return }
        var without = list(resolved.field)
        without.elements[elements[source].id] = nil
        var visible = elements
        visible.remove(at: source)
        let anchor = insertionAnchor(without, visible: visible, at: destination)
        try emit(.listMove(resolved.fieldPath, element: elements[source].id, anchor: anchor))
    }

    /// Removes every element this replica has seen (concurrent inserts on other replicas survive).
    public func removeAllElements(in path: PropertyPath, of type: String, primaryKey: PrimaryKey) throws {
        try emit(.listClear(try resolveListPath(type, primaryKey, path).fieldPath))
    }
}

/// Turns "this property now holds that value" into the smallest set of instructions, so that concurrent edits
/// of other fields, list elements and embedded fields survive the merge.
struct Differ {
    let transaction: Transaction
    /// Whether an embedded object's field that the new value does not hold is left as it is, rather than cleared:
    /// a model of an earlier release does not hold the fields a later release added (see ``ModelCoding``).
    var leavesAbsentFields = false

    /// The largest old × new list product diffed element by element; larger lists are replaced whole.
    static let maximumDiffCells = 4_000_000

    func update(from old: Value, to new: Value, property: Property, path: FieldPath) throws {
        guard !old.storesAlike(new) else { return }
        if property.isDictionary, case .dictionary(let oldEntries) = old {
            // Key by key (rule 1): a key another replica writes meanwhile is left alone.
            let newEntries = new.dictionaryValue ?? [:]
            for key in oldEntries.keys.sorted() where newEntries[key] == nil {
                try transaction.emit(.dictionaryErase(path, key: key))
            }
            for key in newEntries.keys.sorted() {
                guard let value = newEntries[key], !(oldEntries[key]?.storesAlike(value) ?? false) else { continue }
                // The same embedded object under the key: field by field (rule 6).
                if case .embedded(let oldObject)? = oldEntries[key], case .embedded(let newObject) = value,
                    oldObject.type == newObject.type,
                    case .dictionary(let state)? = try field(at: path),
                    case .embedded(let child)? = state.entries[key]?.value
                {
                    try updateEmbedded(from: oldObject, to: newObject, at: path, id: child.id)
                    continue
                }
                try transaction.emit(.dictionarySet(path, key: key, value: value))
            }
            return
        }
        if property.isSet, case .list = old {
            try updateSet(to: new.listValue ?? [], property: property, path: path)
            return
        }
        if property.isList, case .list(let oldElements) = old {
            try updateList(from: oldElements, to: new.listValue ?? [], property: property, path: path)
            return
        }
        if case .embedded(let oldObject) = old, case .embedded(let newObject) = new, oldObject.type == newObject.type,
            let id = try embeddedID(at: path), transaction.working.schema[type: newObject.type] != nil
        {
            try updateEmbedded(from: oldObject, to: newObject, at: path, id: id)
            return
        }
        try transaction.emit(.set(path, new))
    }

    /// Updates the embedded object instance `id`, held by the property at `path` (or by one of its keys), field by
    /// field, so that concurrent edits of its other fields survive (rule 6).
    func updateEmbedded(from oldObject: EmbeddedObject, to newObject: EmbeddedObject, at path: FieldPath, id: ElementID)
        throws
    {
        guard let childType = transaction.working.schema[type: newObject.type] else { return }
        let childPath = FieldPath(
            type: path.type, primaryKey: path.primaryKey,
            steps: path.steps + [EmbeddedStep(property: path.property, id: id)], property: "")
        for child in childType.properties where !(leavesAbsentFields && newObject.fields[child.name] == nil) {
            var fieldPath = childPath
            fieldPath.property = child.name
            try update(
                from: oldObject[child.name], to: value(of: child, in: newObject), property: child, path: fieldPath)
        }
    }

    /// What `property` holds in the embedded object `object` is set to: the value it gives, or for a field it leaves
    /// out, what a new embedded object's field reads (its default, null, an empty list), never a null where the
    /// property is required.
    func value(of property: Property, in object: EmbeddedObject) -> Value {
        object.fields[property.name] ?? ObjectRecord.value(nil, of: property, in: transaction.working.schema)
    }

    func field(at path: FieldPath) throws -> FieldState? {
        guard var fields = try transaction.record(path.type, path.primaryKey)?.fields else { return nil }
        for step in path.steps {
            switch fields[step.property] {
            case .register(let register)?:
                guard case .embedded(let child) = register.value, child.id == step.id else { return nil }
                fields = child.fields
            case .list(let list)?:
                guard
                    let child = list.elements.values.lazy.compactMap({ element -> EmbeddedState? in
                        if case .embedded(let child) = element.value, child.id == step.id { return child }
                        return nil
                    }).first
                else { return nil }
                fields = child.fields
            case .dictionary(let dictionary)?:
                guard
                    let child = dictionary.entries.values.lazy.compactMap({ entry -> EmbeddedState? in
                        if case .embedded(let child)? = entry.value, child.id == step.id { return child }
                        return nil
                    }).first
                else { return nil }
                fields = child.fields
            case nil:
                return nil
            }
        }
        return fields[path.property]
    }

    func embeddedID(at path: FieldPath) throws -> ElementID? {
        guard case .register(let register)? = try field(at: path), case .embedded(let child) = register.value else {
            return nil
        }
        return child.id
    }

    /// The list at `path`, empty when it holds none.
    func list(at path: FieldPath) throws -> ListState {
        guard case .list(let list)? = try field(at: path) else { return ListState() }
        return list
    }

    /// A set's edits (rule 5): every element of a value the new set lacks is erased (the copies two replicas added
    /// concurrently too), and each value it adds is inserted once, at the end. A value another replica adds meanwhile
    /// is not among the elements erased, so it stays.
    func updateSet(to new: [Value], property: Property, path: FieldPath) throws {
        let wanted = ObjectRecord.distinctElements(new)
        let current = try transaction.visibleElements(list(at: path), of: property)
        func held(_ element: ListElement) -> Value? {
            if case .scalar(let value) = element.value { value } else { nil }
        }
        for element in current {
            guard let value = held(element), !wanted.contains(where: { $0.storesAlike(value) }) else { continue }
            try transaction.emit(.listErase(path, element: element.id))
        }
        let additions = wanted.filter { value in !current.contains { held($0)?.storesAlike(value) == true } }
        guard !additions.isEmpty else { return }
        guard let plan = try insertionPlan(at: path) else { return try transaction.emit(.set(path, .list(wanted))) }
        try transaction.emitInserts(additions[...], after: current.last?.position, plan: plan, at: path)
    }

    func updateList(from old: [Value], to new: [Value], property: Property, path: FieldPath) throws {
        // Same length, embedded elements: edit each element in place, so it keeps its identity.
        if old.count == new.count, case .embedded = property.kind {
            let current = try list(at: path).orderedElements()
            guard current.count == old.count else { return try transaction.emit(.set(path, .list(new))) }
            for index in old.indices where !old[index].storesAlike(new[index]) {
                guard case .embedded(let child) = current[index].value,
                    let childType = transaction.working.schema[type: child.type],
                    case .embedded(let oldObject) = old[index], case .embedded(let newObject) = new[index]
                else {
                    try transaction.emit(.listSet(path, element: current[index].id, value: new[index]))
                    continue
                }
                for field in childType.properties where !(leavesAbsentFields && newObject.fields[field.name] == nil) {
                    let fieldPath = FieldPath(
                        type: path.type, primaryKey: path.primaryKey,
                        steps: path.steps + [EmbeddedStep(property: path.property, id: child.id)], property: field.name)
                    try update(
                        from: oldObject[field.name], to: value(of: field, in: newObject), property: field,
                        path: fieldPath)
                }
            }
            return
        }
        guard old.count * new.count <= Self.maximumDiffCells else {
            return try transaction.emit(.set(path, .list(new)))
        }
        let kept = Self.longestCommonSubsequence(old, new)
        // `old` is the list as read: a list of links without its links to objects that do not exist, which the
        // edits leave where they are.
        let current = try transaction.visibleElements(list(at: path), of: property)
        guard current.count == old.count else { return try transaction.emit(.set(path, .list(new))) }
        let keptOld = Set(kept.map(\.old))
        for index in old.indices where !keptOld.contains(index) {
            try transaction.emit(.listErase(path, element: current[index].id))
        }
        // Each run of new elements goes right after the slot of the element kept before it in `new`: hidden links,
        // and links in `new` to objects not created yet, do not shift it.
        var keptSlot = [ElementID?](repeating: nil, count: new.count)
        for pair in kept { keptSlot[pair.new] = current[pair.old].position }
        guard keptSlot.contains(nil) else { return }
        // Planned once for all the inserts, not read again for each: filling a list costs O(n log n), not O(n²).
        guard let plan = try insertionPlan(at: path) else { return try transaction.emit(.set(path, .list(new))) }
        var start = 0
        while start < new.count {
            guard keptSlot[start] == nil else {
                start += 1
                continue
            }
            var end = start
            while end < new.count, keptSlot[end] == nil { end += 1 }
            try transaction.emitInserts(
                new[start..<end], after: start > 0 ? keptSlot[start - 1] : nil, plan: plan, at: path)
            start = end
        }
    }

    /// The plan for inserting into the list at `path`, or `nil` when the field holds no list yet. The list is read
    /// here, so that no copy of it outlives the call: the inserts then change it in place instead of copying it.
    private func insertionPlan(at path: FieldPath) throws -> ListInsertionPlan? {
        guard case .list(let list)? = try field(at: path) else { return nil }
        return ListInsertionPlan(list)
    }

    /// The index pairs of a longest common subsequence, in order. O(old × new) time and memory.
    static func longestCommonSubsequence(_ old: [Value], _ new: [Value]) -> [(old: Int, new: Int)] {
        let rows = old.count
        let columns = new.count
        if rows == 0 || columns == 0 { return [] }
        var lengths = [Int](repeating: 0, count: (rows + 1) * (columns + 1))
        for i in stride(from: rows - 1, through: 0, by: -1) {
            for j in stride(from: columns - 1, through: 0, by: -1) {
                lengths[i * (columns + 1) + j] =
                    old[i].storesAlike(new[j])
                    ? lengths[(i + 1) * (columns + 1) + j + 1] + 1
                    : max(lengths[(i + 1) * (columns + 1) + j], lengths[i * (columns + 1) + j + 1])
            }
        }
        var pairs: [(old: Int, new: Int)] = []
        var i = 0
        var j = 0
        while i < rows && j < columns {
            if old[i].storesAlike(new[j]) {
                pairs.append((i, j))
                i += 1
                j += 1
            } else if lengths[(i + 1) * (columns + 1) + j] >= lengths[i * (columns + 1) + j + 1] {
                i += 1
            } else {
                j += 1
            }
        }
        return pairs
    }
}
