import TributaryModel

// Key path resolution: from names in the text to property steps, `@` operators and the type of the values a
// path yields. Also the key paths of SORT and DISTINCT.

extension TypeChecker {
    // MARK: Key paths

    /// Resolves a key path from the queried type; returns the path and the type of each value it yields.
    func resolve(_ components: [PathComponent], text: String) throws(QueryError) -> (KeyPath, Base) {
        var steps: [PathStep] = []
        var type: ObjectSchema? = root
        var index = 0
        // Inside a SUBQUERY, paths start at the list's element, with or without its variable (`$x.name` or `name`).
        if let first = components.first, first.isVariable, first.name == variable {
            index = 1
            guard components.count > 1 else {
                throw error(
                    .unsupported, "\(first.name) is an object; compare one of its properties, as in \(first.name).name",
                    at: first.position)
            }
        }
        while index < components.count {
            let component = components[index]
            if component.isOperator && component.name.lowercased() == "links" {
                let (step, next, consumed) = try resolveBacklinks(components, at: index, in: type, after: steps)
                steps.append(step)
                type = next
                index += consumed
                if next == nil {  // `@links.@count`
                    return (KeyPath(steps: steps, operation: .count, text: text), .scalar(.int))
                }
                continue
            }
            if component.isOperator, component.name.lowercased() == "count", index == components.count - 1,
                var last = steps.last, last.target == .scalar(.mixed), !last.yieldsMany
            {
                // `payload.@count`, `payload[0].@count`: how many elements the list or dictionary a mixed value
                // holds there has (none for any other value); `@size` also measures a string or data.
                last.mixedSelectors.append(.all)
                steps[steps.count - 1] = last
                return (KeyPath(steps: steps, operation: .count, text: text), .scalar(.int))
            }
            if component.isOperator {
                let (operation, base) = try resolveOperation(components, at: index, steps: steps, text: text)
                return (KeyPath(steps: steps, operation: operation, text: text), base)
            }
            var (step, next) = try resolveStep(component, in: type, after: steps)
            if let selector = component.subscriptSelector, step.target == .scalar(.mixed), !step.isList,
                !step.isDictionary
            {
                // Into the list or dictionary a mixed value holds, and those nested in it: `mixed['key']`,
                // `mixed[0]`, `mixed[*]`, `mixed[0]['key']`.
                let selectors = [selector] + component.deeperSubscripts
                for (position, selector) in selectors.enumerated() {
                    switch selector.kind {
                    case .key(let key): step.mixedSelectors.append(.key(key))
                    case .all: step.mixedSelectors.append(.all)
                    case .first, .last, .index:
                        step.mixedSelectors += selector.element.map(MixedSelector.element).map { [$0] } ?? []
                    case .size:
                        guard position == selectors.count - 1, index == components.count - 1 else {
                            throw error(.syntax, "'[SIZE]' must end the key path", at: selector.position)
                        }
                        steps.append(step)
                        return (KeyPath(steps: steps, operation: .size, text: text), .scalar(.int))
                    }
                }
            } else if let deeper = component.deeperSubscripts.first {
                throw error(
                    .typeMismatch,
                    "'\(component.name)' takes one subscript; only a mixed value, which may hold nested lists and "
                        + "dictionaries, takes more", at: deeper.position)
            } else if let selector = component.subscriptSelector, step.isDictionary {
                // `dict['key']` is one key's value; `dict[*]` every value; `dict[SIZE]` how many.
                switch selector.kind {
                case .key(let key): step.dictionaryKey = key
                case .all: break
                case .size:
                    guard index == components.count - 1 else {
                        throw error(.syntax, "'[SIZE]' must end the key path", at: components[index + 1].position)
                    }
                    steps.append(step)
                    return (KeyPath(steps: steps, operation: .count, text: text), .scalar(.int))
                default:
                    throw error(
                        .typeMismatch,
                        "'\(component.name)' is a dictionary: take a key's value with ['key'], or every value with [*]",
                        at: selector.position)
                }
            } else if let selector = component.subscriptSelector {
                guard step.isList else {
                    throw error(
                        .typeMismatch,
                        "'\(component.name)' is not a list; subscripts such as [FIRST] take an element of a list",
                        at: selector.position)
                }
                if case .key = selector.kind {
                    throw error(
                        .typeMismatch,
                        "'\(component.name)' is a list, not a dictionary: subscripts by key need a dictionary",
                        at: selector.position)
                }
                step.element = selector.element
                if selector.kind == .size {
                    guard index == components.count - 1 else {
                        throw error(.syntax, "'[SIZE]' must end the key path", at: components[index + 1].position)
                    }
                    steps.append(step)
                    return (KeyPath(steps: steps, operation: .count, text: text), .scalar(.int))
                }
            }
            steps.append(step)
            type = next
            index += 1
        }
        guard let last = steps.last else {
            throw error(.syntax, "expected a property name", at: components.first?.position ?? 0)
        }
        return (KeyPath(steps: steps, operation: nil, text: text), base(of: last))
    }

    private func base(of step: PathStep) -> Base {
        switch step.target {
        case .scalar(let type): return .scalar(type)
        case .link(let type):
            var key: ScalarType?
            if let keyProperty = schema[type: type]?.primaryKeyProperty, case .scalar(let keyType) = keyProperty.kind {
                key = keyType
            }
            return .link(type: type, key: key)
        case .embedded(let type): return .embedded(type)
        case .backlinks(let sources, _):
            var key: ScalarType?
            if let source = sources.first,
                case .scalar(let keyType) = schema[type: source.type]?.primaryKeyProperty?.kind
            {
                key = keyType
            }
            return .link(type: sources.first?.type, key: key)
        }
    }

    /// `@links.Type.property` or `@links.@count` at `components[index]`, on an object of `type`: the step, the type
    /// it leads to (`nil` for `@links.@count`, which must end the path), and how many components it took.
    private func resolveBacklinks(
        _ components: [PathComponent], at index: Int, in type: ObjectSchema?, after steps: [PathStep]
    ) throws(QueryError) -> (PathStep, ObjectSchema?, Int) {
        let component = components[index]
        let subject = steps.isEmpty ? "'\(root.name)'" : "'\(root.name).\(steps.map(\.name).joined(separator: "."))'"
        guard let type, !type.isEmbedded, let keyProperty = type.primaryKeyProperty else {
            let what =
                type.map {
                    $0.isEmbedded
                        ? "an embedded object, which links cannot point at" : "an object without a primary key"
                } ?? "not an object"
            throw error(
                .typeMismatch, "@links needs an object that links can point at, but \(subject) is \(what)",
                at: component.position)
        }
        guard index + 1 < components.count else {
            throw error(
                .syntax, "expected a type and a property after @links, as in @links.Project.items, or @links.@count",
                at: component.position)
        }
        let next = components[index + 1]
        if next.isOperator {
            let name = next.name.lowercased()
            guard name == "count" || name == "size" else {
                throw error(.unsupported, "after @links, only @count or @size may follow directly", at: next.position)
            }
            guard index + 2 == components.count else {
                throw error(.syntax, "'@links.@\(next.name)' must end the key path", at: components[index + 2].position)
            }
            var sources: [BacklinkSource] = []
            for linking in schema.types where !linking.isEmbedded {
                guard let linkingKey = linking.primaryKeyProperty?.name else { continue }
                for property in linking.properties where property.kind == .link(type.name) {
                    sources.append(BacklinkSource(type: linking.name, property: property.name, keyProperty: linkingKey))
                }
            }
            let step = PathStep(
                name: "@links", target: .backlinks(sources, keyProperty: keyProperty.name), isList: true)
            return (step, nil, 2)
        }
        guard index + 2 < components.count, !components[index + 2].isOperator else {
            throw error(
                .syntax, "expected a type and a property after @links, as in @links.Project.items, or @links.@count",
                at: next.position)
        }
        let propertyComponent = components[index + 2]
        guard let linking = schema[type: next.name], !linking.isEmbedded else {
            throw error(
                .unknownProperty, "@links names type '\(next.name)', which the schema lacks (or is embedded)",
                at: next.position)
        }
        guard let property = linking[property: propertyComponent.name] else {
            throw error(
                .unknownProperty, "'\(linking.name)' has no property '\(propertyComponent.name)'",
                at: propertyComponent.position)
        }
        guard property.kind == .link(type.name) else {
            throw error(
                .typeMismatch,
                "'\(linking.name).\(property.name)' does not link to '\(type.name)', so it makes no backlinks to \(subject)",
                at: propertyComponent.position)
        }
        guard let linkingKey = linking.primaryKeyProperty?.name else {
            throw error(.typeMismatch, "'\(linking.name)' has no primary key", at: next.position)
        }
        let source = BacklinkSource(type: linking.name, property: property.name, keyProperty: linkingKey)
        var step = PathStep(
            name: "@links.\(linking.name).\(property.name)",
            target: .backlinks([source], keyProperty: keyProperty.name),
            isList: true)
        if let deeper = propertyComponent.deeperSubscripts.first {
            throw error(.typeMismatch, "backlinks take one subscript", at: deeper.position)
        }
        if let selector = propertyComponent.subscriptSelector {
            guard selector.kind != .size else {
                throw error(
                    .unsupported, "write @links.\(linking.name).\(property.name).@count for the number of backlinks",
                    at: selector.position)
            }
            step.element = selector.element
        }
        return (step, linking, 3)
    }

    /// Where a message should say a path is: `'Task.author' (Person)` or just `'Task'`.
    private func owner(_ steps: [PathStep], type: ObjectSchema) -> String {
        steps.isEmpty ? "'\(type.name)'" : "'\(root.name).\(steps.map(\.name).joined(separator: "."))' (\(type.name))"
    }

    private func resolveStep(_ component: PathComponent, in type: ObjectSchema?, after steps: [PathStep])
        throws(QueryError) -> (PathStep, ObjectSchema?)
    {
        guard let type else {
            let previous = steps.map(\.name).joined(separator: ".")
            throw error(
                .typeMismatch,
                "'\(root.name).\(previous)' is a \(steps.last.map(describeStep) ?? "value") and has no property '\(component.name)'",
                at: component.position)
        }
        if type[property: component.name] == nil, let computed = type[linkingObjects: component.name] {
            // A declared LinkingObjects property: the backlinks of `@links.Origin.property`.
            guard let origin = schema[type: computed.originType], let originKey = origin.primaryKeyProperty?.name,
                let key = type.primaryKeyProperty?.name
            else {
                throw error(
                    .unknownProperty,
                    "'\(type.name).\(computed.name)' lists objects of '\(computed.originType)', which the schema lacks",
                    at: component.position)
            }
            let source = BacklinkSource(type: origin.name, property: computed.originProperty, keyProperty: originKey)
            return (PathStep(name: computed.name, target: .backlinks([source], keyProperty: key), isList: true), origin)
        }
        guard let property = type[property: component.name] else {
            var message = "\(owner(steps, type: type)) has no property '\(component.name)'"
            let names = type.properties.map(\.name) + type.linkingObjects.map(\.name)
            if let suggestion = closestName(to: component.name, in: names) {
                message += "; did you mean '\(suggestion)'?"
            }
            throw error(.unknownProperty, message, at: component.position)
        }
        let target: PathStep.Target
        var next: ObjectSchema?
        switch property.kind {
        case .scalar(let scalar):
            target = .scalar(scalar)
        case .link(let name), .embedded(let name):
            guard let targetType = schema[type: name] else {
                throw error(
                    .unknownProperty,
                    "'\(type.name).\(property.name)' refers to type '\(name)', which the schema lacks",
                    at: component.position)
            }
            next = targetType
            if case .link = property.kind { target = .link(name) } else { target = .embedded(name) }
        }
        var step = PathStep(name: property.name, target: target, isList: property.isList)
        step.isDictionary = property.isDictionary
        return (step, next)
    }

    private func describeStep(_ step: PathStep) -> String {
        let element: String
        switch step.target {
        case .scalar(let type): element = type.description
        case .link(let type): element = "link<\(type)>"
        case .embedded(let type): element = "embedded<\(type)>"
        case .backlinks(let sources, _): element = "link<\(sources.first?.type ?? "?")>"
        }
        if step.isDictionary && step.dictionaryKey == nil { return "dictionary<\(element)>" }
        return step.yieldsMany ? "list<\(element)>" : element
    }

    /// `@count`, `@size`, `@min`, `@max`, `@sum`, `@avg` at `components[index]`, after `steps`.
    private func resolveOperation(_ components: [PathComponent], at index: Int, steps: [PathStep], text: String)
        throws(QueryError) -> (PathOperation, Base)
    {
        let component = components[index]
        let name = component.name.lowercased()
        let written = "@" + component.name
        let subject = "'\(root.name).\(steps.map(\.name).joined(separator: "."))'"
        guard let last = steps.last else {
            throw error(.syntax, "'\(written)' must follow a key path, as in items.\(written)", at: component.position)
        }
        if name == "links" {
            throw error(.unsupported, "@links (backlinks) are not supported", at: component.position)
        }
        guard ["count", "size", "min", "max", "sum", "avg", "type", "keys", "values"].contains(name) else {
            throw error(
                .unknownProperty,
                "unknown operator '\(written)': expected @count, @size, @min, @max, @sum, @avg, @type, @keys or @values",
                at: component.position)
        }
        if name == "keys" || name == "values" {
            guard last.isDictionary, last.dictionaryKey == nil else {
                throw error(
                    .typeMismatch, "'\(written)' needs a dictionary, but \(subject) is \(describeStep(last))",
                    at: component.position)
            }
            if index + 1 < components.count {
                // `dict.@values.@count`, `dict.@keys.@size`: how many.
                let next = components[index + 1]
                guard index + 2 == components.count, next.isOperator,
                    ["count", "size"].contains(next.name.lowercased())
                else {
                    throw error(
                        .syntax, "'\(written)' ends the key path, or is followed by @count",
                        at: next.position)
                }
                return (.count, .scalar(.int))
            }
            return name == "keys" ? (.keys, .scalar(.string)) : (.values, base(of: last))
        }
        if name == "type" {
            // The type of the value (of each value, for a list): what a mixed property holds.
            guard index == components.count - 1 else {
                throw error(.syntax, "'\(written)' must end the key path", at: components[index + 1].position)
            }
            guard case .scalar = last.target else {
                throw error(
                    .typeMismatch, "'\(written)' reads the type of a value, but \(subject) is \(describeStep(last))",
                    at: component.position)
            }
            return (.type, .scalar(.string))
        }
        // Only the collection being counted or aggregated may be a list: one value per object.
        if steps.dropLast().contains(where: \.yieldsMany) {
            throw error(
                .unsupported, "'\(written)' over a key path that goes through another list is not supported",
                at: component.position)
        }
        if name == "count" || name == "size" {
            guard index == components.count - 1 else {
                throw error(.syntax, "'\(written)' must end the key path", at: components[index + 1].position)
            }
            if last.yieldsMany { return (.count, .scalar(.int)) }
            if name == "size", case .scalar(let type) = last.target, type == .string || type == .data {
                return (.size, .scalar(.int))
            }
            // A mixed value: the size of the string, data, list or dictionary it holds.
            if last.target == .scalar(.mixed) { return (.size, .scalar(.int)) }
            let needs = name == "size" ? "a list, a string or data" : "a list"
            throw error(
                .typeMismatch, "'\(written)' needs \(needs), but \(subject) is \(describeStep(last))",
                at: component.position)
        }
        let aggregate = Aggregate(rawValue: name) ?? .sum
        guard last.yieldsMany else {
            throw error(
                .typeMismatch, "'\(written)' needs a list, but \(subject) is \(describeStep(last))",
                at: component.position)
        }
        var subSteps: [PathStep] = []
        var elementType: ScalarType
        switch last.target {
        case .scalar(let type):
            guard index == components.count - 1 else {
                throw error(
                    .typeMismatch, "\(subject) is \(describeStep(last)); '\(written)' of it must end the key path",
                    at: components[index + 1].position)
            }
            elementType = type
        case .link, .embedded, .backlinks:
            let typeName = last.target.objectType ?? ""
            guard index + 1 < components.count else {
                throw error(
                    .typeMismatch,
                    "'\(written)' of a list of objects needs a property, as in \(text).<property>",
                    at: component.position)
            }
            var type = schema[type: typeName]
            for subComponent in components[(index + 1)...] {
                if subComponent.isOperator {
                    throw error(
                        .unsupported, "'@\(subComponent.name)' after '\(written)' is not supported",
                        at: subComponent.position)
                }
                let (step, next) = try resolveStep(subComponent, in: type, after: steps + subSteps)
                if step.yieldsMany {
                    throw error(
                        .unsupported, "'\(written)' through another list is not supported", at: subComponent.position)
                }
                subSteps.append(step)
                type = next
            }
            guard case .scalar(let type) = subSteps.last?.target else {
                throw error(
                    .typeMismatch, "'\(written)' needs a number or date property at the end of the key path",
                    at: component.position)
            }
            elementType = type
        }
        let allowed: [ScalarType] =
            aggregate == .min || aggregate == .max
            ? [.int, .double, .decimal, .float, .date] : [.int, .double, .decimal, .float]
        guard allowed.contains(elementType) else {
            let kinds = aggregate == .min || aggregate == .max ? "numbers or dates" : "numbers"
            throw error(
                .typeMismatch,
                "'\(written)' needs \(kinds), but \(subject)\(subSteps.isEmpty ? "" : " holds objects whose property") is \(elementType)",
                at: component.position)
        }
        let result: ScalarType =
            switch (aggregate, elementType) {
            case (.avg, .decimal): .decimal
            case (.avg, _), (.sum, .float): .double
            default: elementType
            }
        return (.aggregate(aggregate, subSteps), .scalar(result))
    }

    // MARK: SUBQUERY

    /// `SUBQUERY(collection, $x, predicate).@count`: the collection must be a list of objects reached through
    /// to-one steps; the predicate is checked against the list's element type, with `$x` standing for an element.
    func typedSubquery(_ subquery: SyntaxSubquery, source: String, start: Int) throws(QueryError) -> Typed {
        let collection = subquery.collection
        let collectionText = sourceText(collection.start, collection.end)
        let (path, _) = try resolve(collection.components, text: collectionText)
        guard path.operation == nil, let last = path.steps.last, last.yieldsMany,
            !path.steps.dropLast().contains(where: \.yieldsMany)
        else {
            throw error(
                .typeMismatch, "SUBQUERY needs a list property, but '\(collectionText)' is not one",
                at: collection.start)
        }
        let elementType: ObjectSchema
        switch last.target {
        case .link, .embedded, .backlinks:
            let name = last.target.objectType ?? ""
            guard let type = schema[type: name] else {
                throw error(.unknownProperty, "the schema lacks type '\(name)'", at: collection.start)
            }
            elementType = type
        case .scalar(let scalar):
            throw error(
                .unsupported,
                "SUBQUERY over a list of \(scalar) values is not supported; use ANY, ALL or NONE on '\(collectionText)'",
                at: collection.start)
        }
        if subquery.variable == variable {
            throw error(
                .syntax, "\(subquery.variable) is already the variable of the enclosing SUBQUERY; choose another name",
                at: subquery.variablePosition)
        }
        var inner = TypeChecker(schema: schema, root: elementType, arguments: arguments, query: query)
        inner.variable = subquery.variable
        let predicate = try inner.check(subquery.predicate)
        let label = "'\(source)' (int)"
        let element = Element(base: .scalar(.int), label: label, position: start)
        return Typed(operand: .subqueryCount(path, predicate), elements: [element], start: start, label: label)
    }

    // MARK: SORT and DISTINCT

    func orderingPath(_ syntax: SyntaxPath, clause: String) throws(QueryError) -> KeyPath {
        let text = sourceText(syntax.start, syntax.end)
        let (path, base) = try resolve(syntax.components, text: text)
        guard !path.isToMany else {
            throw error(
                .unsupported, "cannot \(clause) by '\(root.name).\(text)': it goes through a list", at: syntax.start)
        }
        guard case .scalar = base else {
            throw error(
                .unsupported, "cannot \(clause) by '\(root.name).\(text)': it is an object; use one of its properties",
                at: syntax.start)
        }
        return path
    }
}

/// The name in `names` closest to `name` by edit distance, when close enough to be a likely typo.
private func closestName(to name: String, in names: [String]) -> String? {
    let target = Array(name.lowercased().unicodeScalars)
    // Property names are at most 200 bytes; a longer name is no typo of one, and would make this slow.
    guard target.count <= 200 else { return nil }
    var best: (name: String, distance: Int)?
    for candidate in names {
        let distance = editDistance(target, Array(candidate.lowercased().unicodeScalars))
        if distance <= max(1, target.count / 3), distance < (best?.distance ?? Int.max) {
            best = (candidate, distance)
        }
    }
    return best?.name
}

/// The optimal-string-alignment distance: insertions, deletions, substitutions and adjacent transpositions.
private func editDistance(_ a: [Unicode.Scalar], _ b: [Unicode.Scalar]) -> Int {
    guard !a.isEmpty else { return b.count }
    guard !b.isEmpty else { return a.count }
    var table = Array(repeating: Array(repeating: 0, count: b.count + 1), count: a.count + 1)
    for i in 0...a.count { table[i][0] = i }
    for j in 0...b.count { table[0][j] = j }
    for i in 1...a.count {
        for j in 1...b.count {
            let cost = a[i - 1] == b[j - 1] ? 0 : 1
            var best = Swift.min(table[i - 1][j] + 1, table[i][j - 1] + 1, table[i - 1][j - 1] + cost)
            if i > 1, j > 1, a[i - 1] == b[j - 2], a[i - 2] == b[j - 1] {
                best = Swift.min(best, table[i - 2][j - 2] + 1)
            }
            table[i][j] = best
        }
    }
    return table[a.count][b.count]
}
