using Microsoft.CodeAnalysis;
using PersistentServices.Generators.Tests.TestSupport;

namespace PersistentServices.Generators.Tests;

/// <summary>PS0001–PS0006 (the property rules). PS0101 has its own class.</summary>
public sealed class PropertyDiagnosticTests
{
    [Fact]
    public async Task Analyze_ValidDeclarationsWithGeneratedImplementation_ReportsNothing()
    {
        const string source = """
            namespace App;

            [Persistent]
            public partial class OrdersController
            {
                [SessionState] public partial List<string>? Cart { get; set; }

                [Shared] public static partial int Orders { get; set; }

                public partial class Nested
                {
                    [SessionState] public partial int Depth { get; private set; }
                }
            }

            [SharedState]
            public partial class Catalog
            {
                [Shared] public partial ImmutableList<string> Titles { get; set; }

                [Shared] public static partial string? Motd { get; set; }
            }

            [SharedState]
            public static partial class Totals
            {
                [Shared] public static partial long Sold { get; set; }
            }

            [Persistent]
            public abstract class AttributedBase
            {
            }

            public partial class InheritsPersistent : AttributedBase
            {
                [Shared] public static partial int Hits { get; set; }
            }
            """;

        var diagnostics = await TestCompiler.AnalyzeValidProgramAsync(source);

        DiagnosticAssert.None(diagnostics);
    }

    [Theory]
    [InlineData("[SessionState] public List<string>? Cart { get; set; }", "SessionState")]
    [InlineData("[SessionState] public int Cart { get => 0; set { } }", "SessionState")]
    [InlineData("[Shared] public static int Cart { get; set; }", "Shared")]
    public async Task Analyze_PropertyNotPartial_ReportsPS0001(string declaration, string attribute)
    {
        var source = $$"""
            namespace App;

            [Persistent]
            public partial class CartController
            {
                {{declaration}}
            }
            """;

        var diagnostics = await TestCompiler.AnalyzeValidProgramAsync(source);

        var diagnostic = DiagnosticAssert.Single(diagnostics, "PS0001", "Cart");
        Assert.Equal(DiagnosticSeverity.Error, diagnostic.Severity);
        Assert.Equal(
            $"[{attribute}] property 'App.CartController.Cart' must be declared 'partial' with accessors but no bodies, so that the source generator can implement it",
            diagnostic.GetMessage(System.Globalization.CultureInfo.InvariantCulture));
        Assert.Equal("docs/diagnostics.md#ps0001", diagnostic.Descriptor.HelpLinkUri);
        Assert.Equal("PersistentServices", diagnostic.Descriptor.Category);
    }

    [Fact]
    public async Task Analyze_DeclaringTypeNotPartial_ReportsPS0002()
    {
        const string source = """
            namespace App;

            public class Cart
            {
                [SessionState] public partial int Count { get; set; }
            }
            """;

        var (diagnostics, _) = await TestCompiler.AnalyzeAsync(source);

        var diagnostic = DiagnosticAssert.Single(diagnostics, "PS0002", "Count");
        Assert.Contains("Type 'App.Cart' must be declared 'partial'", diagnostic.GetMessage(System.Globalization.CultureInfo.InvariantCulture), StringComparison.Ordinal);
    }

    [Fact]
    public async Task Analyze_ContainingTypeNotPartial_ReportsPS0002NamingTheOuterType()
    {
        const string source = """
            namespace App;

            public class Outer
            {
                public partial class Inner
                {
                    [SessionState] public partial int Count { get; set; }
                }
            }
            """;

        var (diagnostics, _) = await TestCompiler.AnalyzeAsync(source);

        var diagnostic = DiagnosticAssert.Single(diagnostics, "PS0002", "Count");
        Assert.Contains("Type 'App.Outer' must be declared 'partial' because it contains [SessionState] property 'App.Outer.Inner.Count'", diagnostic.GetMessage(System.Globalization.CultureInfo.InvariantCulture), StringComparison.Ordinal);
    }

    [Theory]
    [InlineData("public partial class Box<T> { [SessionState] public partial int Value { get; set; } }", "generic types are not supported")]
    [InlineData("public partial class Box<T> { public partial class Inner { [SessionState] public partial int Value { get; set; } } }", "nested in generic type 'App.Box<T>'")]
    [InlineData("public partial struct Box { [SessionState] public partial int Value { get; set; } }", "structs are not supported")]
    [InlineData("public partial record struct Box { [SessionState] public partial int Value { get; set; } }", "record structs are not supported")]
    [InlineData("public partial interface IBox { [SessionState] partial int Value { get; set; } }", "interfaces are not supported")]
    [InlineData("public static partial class Box { [SessionState] public static partial int Value { get; set; } }", "static classes may hold [Shared] properties only")]
    [InlineData("file partial class Box { [SessionState] public partial int Value { get; set; } }", "file-local types are not supported")]
    public async Task Analyze_UnsupportedDeclaringType_ReportsPS0003(string declaration, string reason)
    {
        var source = "namespace App;\n\n" + declaration + "\n";

        var (diagnostics, _) = await TestCompiler.AnalyzeAsync(source);

        var diagnostic = DiagnosticAssert.Single(diagnostics, "PS0003", "Value");
        Assert.Contains(reason, diagnostic.GetMessage(System.Globalization.CultureInfo.InvariantCulture), StringComparison.Ordinal);
    }

    [Fact]
    public async Task Analyze_SharedStaticPropertyInStaticSharedStateClass_ReportsNothing()
    {
        const string source = """
            namespace App;

            [SharedState]
            public static partial class Box
            {
                [Shared] public static partial int Value { get; set; }
            }
            """;

        DiagnosticAssert.None(await TestCompiler.AnalyzeValidProgramAsync(source));
    }

    [Theory]
    [InlineData("[SessionState] public partial int this[int index] { get; set; }", "this", "indexers are not supported")]
    [InlineData("[SessionState] public partial int Value { get; }", "Value", "it needs both a get and a set accessor")]
    [InlineData("[SessionState] public partial int Value { set; }", "Value", "it needs both a get and a set accessor")]
    [InlineData("[SessionState] public partial int Value { get; init; }", "Value", "init-only setters are not supported")]
    [InlineData("[SessionState] public partial ref int Value { get; }", "Value", "ref-returning properties are not supported")]
    [InlineData("[SessionState] public abstract partial int Value { get; set; }", "Value", "abstract properties are not supported")]
    [InlineData("[SessionState] public required partial int Value { get; set; }", "Value", "'required' properties are not supported")]
    [InlineData("[SessionState] public partial int Value { get; set; }\n    public partial int Value { get => 1; set { } }", "Value", "it already has an implementation part")]
    public async Task Analyze_UnsupportedPropertyShape_ReportsPS0004(string declaration, string spanText, string reason)
    {
        var source = $$"""
            namespace App;

            public abstract partial class Cart
            {
                {{declaration}}
            }
            """;

        var (diagnostics, _) = await TestCompiler.AnalyzeAsync(source);

        var diagnostic = DiagnosticAssert.Single(diagnostics, "PS0004", spanText);
        Assert.Contains(reason, diagnostic.GetMessage(System.Globalization.CultureInfo.InvariantCulture), StringComparison.Ordinal);
    }

    [Theory]
    [InlineData("", "public static partial int Value { get; set; }", "a static [Shared] property must be declared in a type marked [Persistent] or [SharedState]")]
    [InlineData("[Persistent]", "public partial int Value { get; set; }", "an instance [Shared] property must be declared in a class marked [SharedState]")]
    [InlineData("", "public partial int Value { get; set; }", "an instance [Shared] property must be declared in a class marked [SharedState]")]
    public async Task Analyze_SharedPropertyInWrongType_ReportsPS0005(string typeAttribute, string declaration, string reason)
    {
        var source = $$"""
            namespace App;

            {{typeAttribute}}
            public partial class Counters
            {
                [Shared] {{declaration}}
            }
            """;

        var (diagnostics, _) = await TestCompiler.AnalyzeAsync(source);

        var diagnostic = DiagnosticAssert.Single(diagnostics, "PS0005", "Value");
        Assert.Contains(reason, diagnostic.GetMessage(System.Globalization.CultureInfo.InvariantCulture), StringComparison.Ordinal);
    }

    [Fact]
    public async Task Analyze_BothSessionStateAndShared_ReportsPS0006Only()
    {
        const string source = """
            namespace App;

            public partial class Cart
            {
                [SessionState, Shared] public partial List<int> Items { get; set; }
            }
            """;

        var (diagnostics, _) = await TestCompiler.AnalyzeAsync(source);

        var diagnostic = DiagnosticAssert.Single(diagnostics, "PS0006", "Items");
        Assert.Equal(
            "Property 'App.Cart.Items' cannot be both [SessionState] and [Shared]: choose per-session state or one value shared by all sessions",
            diagnostic.GetMessage(System.Globalization.CultureInfo.InvariantCulture));
    }

    [Fact]
    public async Task Analyze_SeveralProblemsOnOneProperty_ReportsEach()
    {
        const string source = """
            namespace App;

            public class Counters
            {
                [Shared] public int Value { get; init; }
            }
            """;

        var (diagnostics, _) = await TestCompiler.AnalyzeAsync(source);

        Assert.Equal(["PS0001", "PS0002", "PS0004", "PS0005"], diagnostics.Select(d => d.Id).Order(StringComparer.Ordinal));
    }

    [Fact]
    public void SupportedDiagnostics_AllDescriptors_HaveDocumentedShape()
    {
        var descriptors = new PersistentPropertyAnalyzer().SupportedDiagnostics
            .Concat(new ReplaySafetyAnalyzer().SupportedDiagnostics)
            .ToList();
        var documentation = File.ReadAllText(FindRepositoryFile("docs/diagnostics.md"));

        Assert.Equal(["PS0001", "PS0002", "PS0003", "PS0004", "PS0005", "PS0006", "PS0101", "PS0102", "PS0201", "PS0202"], descriptors.Select(d => d.Id));
        foreach (var descriptor in descriptors)
        {
            Assert.Equal("PersistentServices", descriptor.Category);
            Assert.Equal("docs/diagnostics.md#" + descriptor.Id.ToLowerInvariant(), descriptor.HelpLinkUri);
            Assert.Contains("\n## " + descriptor.Id + "\n", documentation.ReplaceLineEndings("\n"), StringComparison.Ordinal);
            Assert.False(string.IsNullOrWhiteSpace(descriptor.Title.ToString(System.Globalization.CultureInfo.InvariantCulture)));
            Assert.False(string.IsNullOrWhiteSpace(descriptor.Description.ToString(System.Globalization.CultureInfo.InvariantCulture)));
            Assert.Contains("{0}", descriptor.MessageFormat.ToString(System.Globalization.CultureInfo.InvariantCulture), StringComparison.Ordinal);
            Assert.True(descriptor.IsEnabledByDefault);
            Assert.Equal(
                descriptor.Id.StartsWith("PS00", StringComparison.Ordinal) ? DiagnosticSeverity.Error : DiagnosticSeverity.Warning,
                descriptor.DefaultSeverity);
        }
    }

    /// <summary>A file of the repository, found by walking up from the test's output directory.</summary>
    private static string FindRepositoryFile(string relativePath)
    {
        for (var directory = new DirectoryInfo(AppContext.BaseDirectory); directory is not null; directory = directory.Parent)
        {
            var candidate = Path.Combine(directory.FullName, relativePath);
            if (File.Exists(candidate))
            {
                return candidate;
            }
        }

        throw new FileNotFoundException("Not found above the test's output directory.", relativePath);
    }
}
