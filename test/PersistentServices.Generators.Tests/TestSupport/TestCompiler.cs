using System.Collections.Immutable;
using Microsoft.CodeAnalysis;
using Microsoft.CodeAnalysis.CSharp;
using Microsoft.CodeAnalysis.Diagnostics;

namespace PersistentServices.Generators.Tests.TestSupport;

/// <summary>Compiles test programs in memory against the runtime and the real PersistentServices assemblies.</summary>
internal static class TestCompiler
{
    public static readonly CSharpParseOptions ParseOptions = new(LanguageVersion.Preview);

    private static readonly Lazy<ImmutableArray<MetadataReference>> References = new(LoadReferences);

    /// <summary>Usings every test program gets (as a separate tree, like ImplicitUsings).</summary>
    private const string GlobalUsings = """
        global using System;
        global using System.Collections.Generic;
        global using System.Collections.Immutable;
        global using System.Linq;
        global using PersistentServices;
        """;

    public static CSharpCompilation CreateCompilation(params string[] sources) => CreateCompilation(OutputKind.DynamicallyLinkedLibrary, sources);

    public static CSharpCompilation CreateCompilation(OutputKind outputKind, string[] sources)
    {
        var trees = new List<SyntaxTree> { CSharpSyntaxTree.ParseText(GlobalUsings, ParseOptions, path: "GlobalUsings.cs") };
        for (var i = 0; i < sources.Length; i++)
        {
            trees.Add(CSharpSyntaxTree.ParseText(sources[i], ParseOptions, path: $"Source{i}.cs"));
        }

        return CSharpCompilation.Create(
            "TestProgram",
            trees,
            References.Value,
            new CSharpCompilationOptions(outputKind, nullableContextOptions: NullableContextOptions.Enable));
    }

    public static GeneratorDriver CreateDriver()
        => CSharpGeneratorDriver.Create(
            [new PersistentPropertyGenerator().AsSourceGenerator()],
            parseOptions: ParseOptions,
            driverOptions: new GeneratorDriverOptions(IncrementalGeneratorOutputKind.None, trackIncrementalGeneratorSteps: true));

    /// <summary>Runs the generator; returns the run's result and the compilation with the generated sources added.</summary>
    public static (GeneratorDriverRunResult Result, Compilation Output) RunGenerator(params string[] sources)
        => RunGenerator(CreateCompilation(sources));

    private static (GeneratorDriverRunResult Result, Compilation Output) RunGenerator(CSharpCompilation compilation)
    {
        var driver = CreateDriver().RunGeneratorsAndUpdateCompilation(compilation, out var output, out _, TestContext.Current.CancellationToken);
        return (driver.GetRunResult(), output);
    }

    /// <summary>
    /// Runs the generator, then both analyzers on the result (as a build does). Returns the PS diagnostics, sorted by
    /// position, and the compiler's own errors.
    /// </summary>
    public static Task<(ImmutableArray<Diagnostic> Analyzer, ImmutableArray<Diagnostic> CompilerErrors)> AnalyzeAsync(params string[] sources)
        => AnalyzeAsync(CreateCompilation(sources));

    private static async Task<(ImmutableArray<Diagnostic> Analyzer, ImmutableArray<Diagnostic> CompilerErrors)> AnalyzeAsync(CSharpCompilation compilation)
    {
        var (_, output) = RunGenerator(compilation);
        var withAnalyzers = output.WithAnalyzers(
            [new PersistentPropertyAnalyzer(), new ReplaySafetyAnalyzer()],
            new CompilationWithAnalyzersOptions(
                new AnalyzerOptions([]),
                onAnalyzerException: null,
                concurrentAnalysis: false,
                logAnalyzerExecutionTime: false,
                reportSuppressedDiagnostics: false));
        var analyzer = await withAnalyzers.GetAnalyzerDiagnosticsAsync(TestContext.Current.CancellationToken);
        var errors = output.GetDiagnostics(TestContext.Current.CancellationToken)
            .Where(d => d.Severity == DiagnosticSeverity.Error)
            .ToImmutableArray();
        return (analyzer.OrderBy(d => d.Location.SourceSpan.Start).ToImmutableArray(), errors);
    }

    /// <summary>The analyzer diagnostics of a program that must otherwise compile without errors.</summary>
    public static async Task<ImmutableArray<Diagnostic>> AnalyzeValidProgramAsync(params string[] sources)
    {
        var (analyzer, errors) = await AnalyzeAsync(sources);
        Assert.True(errors.IsEmpty, "The test program does not compile:\n" + string.Join("\n", errors));
        return analyzer;
    }

    /// <summary>The analyzer diagnostics of an application (top-level statements allowed) that must compile without errors.</summary>
    public static async Task<ImmutableArray<Diagnostic>> AnalyzeValidApplicationAsync(params string[] sources)
    {
        var (analyzer, errors) = await AnalyzeAsync(CreateCompilation(OutputKind.ConsoleApplication, sources));
        Assert.True(errors.IsEmpty, "The test program does not compile:\n" + string.Join("\n", errors));
        return analyzer;
    }

    private static ImmutableArray<MetadataReference> LoadReferences()
    {
        // The test process runs on the shared frameworks (Microsoft.NETCore.App and, through PersistentServices.AspNetCore,
        // Microsoft.AspNetCore.App); its trusted platform assemblies are those plus this test's dependencies.
        var paths = ((string)AppContext.GetData("TRUSTED_PLATFORM_ASSEMBLIES")!)
            .Split(Path.PathSeparator, StringSplitOptions.RemoveEmptyEntries)
            .ToList();
        paths.Add(typeof(SessionStateAttribute).Assembly.Location);
        paths.Add(typeof(PersistentAttribute).Assembly.Location);

        var byName = new Dictionary<string, string>(StringComparer.OrdinalIgnoreCase);
        foreach (var path in paths)
        {
            var name = Path.GetFileNameWithoutExtension(path);
            if (name.StartsWith("System.", StringComparison.Ordinal)
                || name.StartsWith("Microsoft.AspNetCore.", StringComparison.Ordinal)
                || name.StartsWith("Microsoft.Extensions.", StringComparison.Ordinal)
                || name is "System" or "mscorlib" or "netstandard" or "Microsoft.AspNetCore" or "Microsoft.Win32.Primitives"
                || name is "PersistentServices.Core" or "PersistentServices.AspNetCore")
            {
                byName.TryAdd(name, path);
            }
        }

        return [.. byName.Values.Order(StringComparer.Ordinal).Select(path => (MetadataReference)MetadataReference.CreateFromFile(path))];
    }
}
