import TributaryModel

extension TypeChecker {
    /// Checks `path GEOWITHIN shape`: the path leads to embedded points, and the shape is a valid region.
    func check(_ syntax: SyntaxGeoWithin) throws(QueryError) -> GeoWithin {
        let source = sourceText(syntax.path.start, syntax.path.end)
        guard case .keyPath(let components) = syntax.path.kind else {
            throw error(
                .typeMismatch,
                "GEOWITHIN needs a key path to an embedded point on its left, not \(source)", at: syntax.path.start)
        }
        let (path, base) = try resolve(components, text: source)
        let subject = variable == nil ? "'\(root.name).\(source)'" : "'\(source)'"
        guard path.operation == nil, case .embedded(let typeName) = base, let type = schema[type: typeName],
            Self.isGeoPoint(type)
        else {
            throw error(
                .typeMismatch,
                "\(subject) is not in the format of a geoWithin query: it must lead to an embedded object with a "
                    + "string property 'type' (\"Point\") and a list<double> 'coordinates' ([longitude, latitude])",
                at: syntax.path.start)
        }
        try checkQuantifier(
            syntax.quantifier, before: subject, isMany: path.isToMany, at: syntax.quantifierPosition)
        return GeoWithin(path: path, region: try region(syntax.shape), quantifier: syntax.quantifier ?? .anyElement)
    }

    /// Whether `type` holds a point as Realm reads one: embedded, with a string `type` and a list of doubles
    /// `coordinates`.
    static func isGeoPoint(_ type: ObjectSchema) -> Bool {
        guard type.isEmbedded, let kind = type.properties.first(where: { $0.name == "type" }),
            let coordinates = type.properties.first(where: { $0.name == "coordinates" })
        else { return false }
        return kind.kind == .scalar(.string) && !kind.isList && coordinates.kind == .scalar(.double)
            && coordinates.isList
    }

    private func region(_ shape: SyntaxGeoShape) throws(QueryError) -> GeoRegion {
        do {
            switch shape.kind {
            case .box(let bottomLeft, let topRight):
                return try GeoRegion.box(try point(bottomLeft), try point(topRight))
            case .circle(let center, let radius):
                guard center.coordinates.count == 2 else {
                    throw error(
                        .invalidLiteral, "the center of a geoCircle is [longitude, latitude], without an altitude",
                        at: center.start)
                }
                return try GeoRegion.circle(try point(center), radius: try number(radius))
            case .polygon(let rings):
                var points: [[GeoPoint]] = []
                for ring in rings {
                    var vertices: [GeoPoint] = []
                    for vertex in ring { vertices.append(try point(vertex)) }
                    points.append(vertices)
                }
                return .polygon(try GeoPolygon(rings: points))
            case .argument:
                throw error(
                    .unsupported,
                    "a shape cannot be an argument: write it in the query, with arguments for its numbers, as in "
                        + "geoCircle([$0, $1], $2)", at: shape.start)
            }
        } catch let failure as GeoShapeError {
            throw error(.invalidLiteral, "the geoWithin region is not valid: \(failure.message)", at: shape.start)
        } catch let failure as QueryError {
            throw failure
        } catch {
            throw self.error(.invalidLiteral, "the geoWithin region is not valid: \(error)", at: shape.start)
        }
    }

    private func point(_ syntax: SyntaxGeoPoint) throws(QueryError) -> GeoPoint {
        GeoPoint(longitude: try number(syntax.coordinates[0]), latitude: try number(syntax.coordinates[1]))
    }

    /// A coordinate or a radius: a number literal, or an argument that is one.
    private func number(_ expression: SyntaxExpression) throws(QueryError) -> Double {
        let value: Value
        switch expression.kind {
        case .literal(let literal):
            value = literal.value
        case .argument(let index, let placeholder):
            value = try argument(index, placeholder: placeholder, at: expression.start)
        default:
            value = .null
        }
        switch value {
        case .int(let int): return Double(int)
        case .double(let double) where double.isFinite: return double
        case .float(let float) where float.isFinite: return Double(float)
        default:
            throw error(
                .typeMismatch,
                "a coordinate or a radius must be a finite number, but \(sourceText(expression.start, expression.end)) is "
                    + (value.isNull ? "null" : value.kindName),
                at: expression.start)
        }
    }
}
