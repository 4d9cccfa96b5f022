using System.Globalization;
using System.Reflection;
using System.Text.Json;
using System.Text.Json.Nodes;
using System.Text.Json.Serialization;
using System.Text.RegularExpressions;
using k8s;
using k8s.Models;
using YamlDotNet.Core;
using YamlDotNet.RepresentationModel;

namespace PersistentServices.Kubernetes.Tests;

/// <summary>
/// Reads Kubernetes manifests (YAML, many documents) into KubernetesClient's model types as strictly as an API server
/// reads them: an unknown <c>apiVersion</c>/<c>kind</c>, an unknown field, a duplicate key or a value of the wrong type
/// throws <see cref="ManifestException"/>. Not through <see cref="KubernetesYaml"/>: with <c>strict: true</c> it refuses
/// unknown fields, but it reads <c>containerPort: "8080"</c> into an <c>int</c> and <c>value: 40</c> into a string, both
/// of which an API server refuses. So each document becomes JSON as <c>kubectl</c> makes it (a quoted scalar stays a
/// string; a plain one is a number, a boolean or null when it reads as one under YAML 1.1, which kubectl's YAML reader
/// follows), and that JSON is read with the package's own System.Text.Json options plus
/// <see cref="JsonUnmappedMemberHandling.Disallow"/> and no duplicate properties.
/// </summary>
internal static partial class StrictManifestReader
{
    private static readonly JsonSerializerOptions Options = CreateOptions();

    /// <summary>Every model type by "apiVersion/kind" (for example <c>apps/v1/StatefulSet</c>, <c>v1/Service</c>).</summary>
    private static readonly Dictionary<string, Type> Types = typeof(V1Pod).Assembly.GetTypes()
        .Select(t => (Type: t, Entity: t.GetCustomAttribute<KubernetesEntityAttribute>()))
        .Where(e => e.Entity is { Kind.Length: > 0 } && typeof(IKubernetesObject).IsAssignableFrom(e.Type) && !e.Type.Name.EndsWith("List", StringComparison.Ordinal))
        .GroupBy(e => ApiVersionKind(e.Entity!.Group is { Length: > 0 } g ? $"{g}/{e.Entity.ApiVersion}" : e.Entity.ApiVersion, e.Entity.Kind), StringComparer.Ordinal)
        .ToDictionary(g => g.Key, g => g.First().Type, StringComparer.Ordinal);

    private static readonly HashSet<string> Nulls = ["", "~", "null", "Null", "NULL"];
    private static readonly HashSet<string> Trues = ["y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"];
    private static readonly HashSet<string> Falses = ["n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"];

    /// <summary>Every object of <paramref name="yaml"/>, each as its model type (<see cref="V1StatefulSet"/>, <see cref="V1Service"/>, …).</summary>
    public static IReadOnlyList<IKubernetesObject<V1ObjectMeta>> Read(string yaml)
    {
        var stream = new YamlStream();
        try
        {
            stream.Load(new StringReader(yaml));
        }
        catch (YamlException ex)
        {
            throw new ManifestException($"not YAML: {ex.Message}", ex);
        }

        var objects = new List<IKubernetesObject<V1ObjectMeta>>();
        foreach (var document in stream.Documents)
        {
            if (document.RootNode is YamlScalarNode { Style: ScalarStyle.Plain } empty && Nulls.Contains(empty.Value ?? ""))
            {
                continue; // an empty document (a leading or trailing ---)
            }

            var json = ToJson(document.RootNode, "$") as JsonObject ?? throw new ManifestException($"a document at line {document.RootNode.Start.Line} is not a mapping");
            var apiVersion = (json["apiVersion"] as JsonValue)?.GetValue<string>();
            var kind = (json["kind"] as JsonValue)?.GetValue<string>();
            var name = (json["metadata"] as JsonObject)?["name"] is JsonValue n && n.TryGetValue<string>(out var s) ? s : "(no name)";
            if (apiVersion is null || kind is null || !Types.TryGetValue(ApiVersionKind(apiVersion, kind), out var type))
            {
                throw new ManifestException($"{kind ?? "(no kind)"} {name}: no such API type '{apiVersion}/{kind}' (line {document.RootNode.Start.Line})");
            }

            try
            {
                objects.Add((IKubernetesObject<V1ObjectMeta>)json.Deserialize(type, Options)!);
            }
            catch (Exception ex) when (ex is JsonException or NotSupportedException or ArgumentException or FormatException or InvalidOperationException)
            {
                throw new ManifestException($"{kind} {name}: {ex.Message}", ex);
            }
        }

        return objects;
    }

    private static string ApiVersionKind(string apiVersion, string kind) => apiVersion + "/" + kind;

    private static JsonSerializerOptions CreateOptions()
    {
        // The package's own options (its converters for IntOrString, quantities, times), copied, never changed in place.
        JsonSerializerOptions? package = null;
        KubernetesJson.AddJsonOptions(o => package = o);
        return new JsonSerializerOptions(package ?? throw new InvalidOperationException("KubernetesJson did not hand out its options"))
        {
            UnmappedMemberHandling = JsonUnmappedMemberHandling.Disallow,
            AllowDuplicateProperties = false,
            NumberHandling = JsonNumberHandling.Strict,
            PropertyNameCaseInsensitive = false,
        };
    }

    private static JsonNode? ToJson(YamlNode node, string path)
    {
        switch (node)
        {
            case YamlMappingNode mapping:
                var obj = new JsonObject();
                foreach (var (key, value) in mapping.Children)
                {
                    if (key is not YamlScalarNode { Value: { } name })
                    {
                        throw new ManifestException($"{path}: a key that is not a scalar (line {key.Start.Line})");
                    }

                    if (obj.ContainsKey(name))
                    {
                        throw new ManifestException($"{path}: the key '{name}' appears twice (line {key.Start.Line})");
                    }

                    obj[name] = ToJson(value, path + "." + name);
                }

                return obj;
            case YamlSequenceNode sequence:
                var array = new JsonArray();
                var index = 0;
                foreach (var item in sequence.Children)
                {
                    array.Add(ToJson(item, $"{path}[{index++}]"));
                }

                return array;
            case YamlScalarNode scalar:
                return Scalar(scalar, path);
            default:
                throw new ManifestException($"{path}: unsupported YAML node (line {node.Start.Line})");
        }
    }

    private static JsonValue? Scalar(YamlScalarNode scalar, string path)
    {
        var text = scalar.Value ?? "";
        if (scalar.Style != ScalarStyle.Plain || (!scalar.Tag.IsEmpty && !scalar.Tag.IsNonSpecific && scalar.Tag.Value == "tag:yaml.org,2002:str"))
        {
            return JsonValue.Create(text);
        }

        if (Nulls.Contains(text))
        {
            return null;
        }

        if (Trues.Contains(text) || Falses.Contains(text))
        {
            return JsonValue.Create(Trues.Contains(text));
        }

        if (IntegerPattern().IsMatch(text))
        {
            var digits = text.Replace("_", "", StringComparison.Ordinal);
            return long.TryParse(digits, NumberStyles.AllowLeadingSign, CultureInfo.InvariantCulture, out var integer)
                ? JsonValue.Create(integer)
                : JsonValue.Create(decimal.Parse(digits, NumberStyles.AllowLeadingSign, CultureInfo.InvariantCulture));
        }

        if (HexPattern().IsMatch(text))
        {
            return JsonValue.Create(long.Parse(text[2..], NumberStyles.AllowHexSpecifier, CultureInfo.InvariantCulture));
        }

        if (FloatPattern().IsMatch(text))
        {
            return JsonValue.Create(double.Parse(text.Replace("_", "", StringComparison.Ordinal), NumberStyles.Float, CultureInfo.InvariantCulture));
        }

        if (text is ".inf" or "-.inf" or "+.inf" or ".Inf" or ".INF" or ".nan" or ".NaN" or ".NAN")
        {
            throw new ManifestException($"{path}: '{text}' has no JSON form (line {scalar.Start.Line})");
        }

        return JsonValue.Create(text);
    }

    [GeneratedRegex(@"^[-+]?(0|[1-9][0-9_]*)$")]
    private static partial Regex IntegerPattern();

    [GeneratedRegex(@"^0x[0-9a-fA-F]+$")]
    private static partial Regex HexPattern();

    [GeneratedRegex(@"^[-+]?([0-9][0-9_]*)?\.[0-9_]*([eE][-+]?[0-9]+)?$|^[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+$")]
    private static partial Regex FloatPattern();
}

/// <summary>A manifest a cluster would refuse to read.</summary>
internal sealed class ManifestException(string message, Exception? inner = null) : Exception(message, inner);
