using Microsoft.CodeAnalysis;
using PersistentServices.Generators.Tests.TestSupport;

namespace PersistentServices.Generators.Tests;

/// <summary>PS0101: the type of a [Shared] property must be immutable.</summary>
public sealed class MutableSharedTypeTests
{
    private const string Types = """
        namespace App;

        public enum Color { Red, Green }

        public sealed record Person(string Name, int Age);

        public sealed record Node(int Value, Node? Next);

        public sealed class Frozen
        {
            private readonly int _x;

            public Frozen(int x) => _x = x;

            public int X => _x;

            public string Name { get; } = "";

            public ImmutableArray<Person> People { get; init; }
        }

        public readonly struct Point
        {
            public Point(int x, int y) { X = x; Y = y; }

            public int X { get; }

            public int Y { get; }
        }

        public struct PlainPoint
        {
            public int X;

            public int Y { get; set; }
        }

        public struct HoldsList
        {
            public List<int> Items;
        }

        public sealed class Settable
        {
            public int Value { get; set; }
        }

        public sealed class PrivatelySettable
        {
            public int Value { get; private set; }

            public void Bump() => Value++;
        }

        public sealed class MutableField
        {
            private int _count;

            public int Count => _count;

            public void Increment() => _count++;
        }

        public sealed record Tagged(string Name, List<string> Tags);

        public class SettableBase
        {
            public string? Label { get; set; }
        }

        public sealed class DerivedFromSettable : SettableBase
        {
        }
        """;

    [Theory]
    [InlineData("int")]
    [InlineData("long")]
    [InlineData("bool")]
    [InlineData("double")]
    [InlineData("string")]
    [InlineData("string?")]
    [InlineData("decimal")]
    [InlineData("Color")]
    [InlineData("DateTime")]
    [InlineData("DateTimeOffset")]
    [InlineData("TimeSpan")]
    [InlineData("Guid")]
    [InlineData("DateOnly")]
    [InlineData("TimeOnly")]
    [InlineData("int?")]
    [InlineData("Guid?")]
    [InlineData("Uri")]
    [InlineData("ImmutableArray<string>")]
    [InlineData("ImmutableList<Person>")]
    [InlineData("ImmutableDictionary<string, ImmutableList<int>>")]
    [InlineData("ImmutableHashSet<Color>")]
    [InlineData("System.Collections.Frozen.FrozenSet<string>")]
    [InlineData("Person")]
    [InlineData("Person?")]
    [InlineData("Node")]
    [InlineData("Frozen")]
    [InlineData("Point")]
    [InlineData("PlainPoint")]
    [InlineData("(int Count, string Name)")]
    [InlineData("KeyValuePair<string, int>")]
    [InlineData("Func<int>")]
    public async Task Analyze_SharedPropertyOfImmutableType_ReportsNothing(string type)
    {
        var diagnostics = await TestCompiler.AnalyzeValidProgramAsync(Types, Store(type));

        DiagnosticAssert.None(diagnostics);
    }

    [Theory]
    [InlineData("int[]", "arrays are mutable")]
    [InlineData("List<string>", "'System.Collections.Generic.List<string>' is a mutable collection")]
    [InlineData("Dictionary<string, int>", "is a mutable collection")]
    [InlineData("HashSet<int>", "is a mutable collection")]
    [InlineData("System.Collections.Concurrent.ConcurrentDictionary<string, int>", "is a mutable collection")]
    [InlineData("System.Collections.ObjectModel.ReadOnlyCollection<int>", "is a mutable collection")]
    [InlineData("IReadOnlyList<int>", "is an interface, and the collection behind it may be mutable")]
    [InlineData("ImmutableList<List<int>>", "its type argument 'System.Collections.Generic.List<int>' is mutable")]
    [InlineData("ImmutableArray<int>.Builder", "is a mutable collection")]
    [InlineData("Settable", "its property 'Value' has a setter")]
    [InlineData("PrivatelySettable", "its property 'Value' has a setter")]
    [InlineData("MutableField", "its field '_count' is not readonly")]
    [InlineData("Tagged", "its property 'Tags' has mutable type 'System.Collections.Generic.List<string>'")]
    [InlineData("DerivedFromSettable", "its property 'Label' has a setter")]
    [InlineData("HoldsList", "its field 'Items' has mutable type")]
    [InlineData("(int Count, int[] Values)", "tuple element 'Values' has mutable type 'int[]'")]
    [InlineData("object", "'object' can refer to any object")]
    [InlineData("System.Text.StringBuilder", "has a setter")]
    public async Task Analyze_SharedPropertyOfMutableType_ReportsPS0101(string type, string reason)
    {
        var diagnostics = await TestCompiler.AnalyzeValidProgramAsync(Types, Store(type));

        var diagnostic = DiagnosticAssert.Single(diagnostics, "PS0101", "Value");
        Assert.Equal(DiagnosticSeverity.Warning, diagnostic.Severity);
        var message = diagnostic.GetMessage(System.Globalization.CultureInfo.InvariantCulture);
        Assert.Contains("of [Shared] property 'App.Store.Value' is mutable: ", message, StringComparison.Ordinal);
        Assert.Contains(reason, message, StringComparison.Ordinal);
    }

    [Fact]
    public async Task Analyze_SessionStatePropertyOfMutableType_ReportsNothing()
    {
        const string source = """
            namespace App;

            public partial class Cart
            {
                [SessionState] public partial List<string>? Items { get; set; }
            }
            """;

        DiagnosticAssert.None(await TestCompiler.AnalyzeValidProgramAsync(source));
    }

    private static string Store(string type) => $$"""
        namespace App;

        [SharedState]
        public partial class Store
        {
            [Shared] public partial {{type}} Value { get; set; }
        }
        """;
}
