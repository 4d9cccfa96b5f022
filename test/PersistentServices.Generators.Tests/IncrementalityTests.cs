using Microsoft.CodeAnalysis;
using Microsoft.CodeAnalysis.CSharp;
using PersistentServices.Generators.Tests.TestSupport;

namespace PersistentServices.Generators.Tests;

/// <summary>The pipeline caches: edits that do not change a [SessionState]/[Shared] declaration regenerate nothing.</summary>
public sealed class IncrementalityTests
{
    private const string Controller = """
        namespace Shop;

        [Persistent]
        public partial class CartController
        {
            [SessionState] public partial List<string>? Cart { get; set; }

            [Shared] public static partial int Orders { get; set; }

            public int Count()
            {
                return Cart?.Count ?? 0;
            }
        }
        """;

    private const string Other = """
        namespace Shop;

        public static class Helpers
        {
            public static int Twice(int value) => value * 2;
        }
        """;

    private static readonly string[] TrackedSteps =
    [
        PersistentPropertyGenerator.SessionStatePropertiesStep,
        PersistentPropertyGenerator.SharedPropertiesStep,
        PersistentPropertyGenerator.TypesStep,
    ];

    [Fact]
    public void Rerun_CommentAddedInMethodBodyOfSameFile_OutputsCachedOrUnchanged()
    {
        var (driver, compilation) = RunOnce();
        var tree = compilation.SyntaxTrees.Single(t => t.FilePath == "Source0.cs");
        var edited = Controller.Replace("return Cart?.Count ?? 0;", "// counted per session\n        return Cart?.Count ?? 0;", StringComparison.Ordinal);
        Assert.NotEqual(Controller, edited);

        var next = compilation.ReplaceSyntaxTree(tree, CSharpSyntaxTree.ParseText(edited, TestCompiler.ParseOptions, path: tree.FilePath, cancellationToken: TestContext.Current.CancellationToken));
        var result = driver.RunGenerators(next, TestContext.Current.CancellationToken).GetRunResult().Results.Single();

        AssertAllCachedOrUnchanged(result);
    }

    [Fact]
    public void Rerun_UnrelatedClassAdded_OutputsCachedOrUnchanged()
    {
        var (driver, compilation) = RunOnce();

        var next = compilation.AddSyntaxTrees(CSharpSyntaxTree.ParseText(
            "namespace Shop;\n\npublic sealed class Unrelated\n{\n    public int Value { get; set; }\n}\n",
            TestCompiler.ParseOptions,
            path: "Unrelated.cs",
            cancellationToken: TestContext.Current.CancellationToken));
        var result = driver.RunGenerators(next, TestContext.Current.CancellationToken).GetRunResult().Results.Single();

        AssertAllCachedOrUnchanged(result);
    }

    [Fact]
    public void Rerun_PropertyTypeChanged_RegeneratesTheFile()
    {
        var (driver, compilation) = RunOnce();
        var tree = compilation.SyntaxTrees.Single(t => t.FilePath == "Source0.cs");
        var edited = Controller.Replace("partial List<string>? Cart", "partial ImmutableList<string>? Cart", StringComparison.Ordinal);

        var next = compilation.ReplaceSyntaxTree(tree, CSharpSyntaxTree.ParseText(edited, TestCompiler.ParseOptions, path: tree.FilePath, cancellationToken: TestContext.Current.CancellationToken));
        var result = driver.RunGenerators(next, TestContext.Current.CancellationToken).GetRunResult().Results.Single();

        var outputs = result.TrackedOutputSteps.SelectMany(step => step.Value).SelectMany(run => run.Outputs).ToList();
        Assert.Contains(outputs, output => output.Reason == IncrementalStepRunReason.Modified);
        Assert.Contains("ImmutableList<string>?", Assert.Single(result.GeneratedSources).SourceText.ToString(), StringComparison.Ordinal);
    }

    private static (GeneratorDriver Driver, Compilation Compilation) RunOnce()
    {
        Compilation compilation = TestCompiler.CreateCompilation(Controller, Other);
        var driver = TestCompiler.CreateDriver().RunGenerators(compilation, TestContext.Current.CancellationToken);
        var first = driver.GetRunResult().Results.Single();
        Assert.Single(first.GeneratedSources);
        foreach (var step in TrackedSteps)
        {
            Assert.True(first.TrackedSteps.ContainsKey(step), $"Step '{step}' is not tracked.");
        }

        return (driver, compilation);
    }

    private static void AssertAllCachedOrUnchanged(GeneratorRunResult result)
    {
        Assert.Single(result.GeneratedSources);
        foreach (var name in TrackedSteps)
        {
            foreach (var run in result.TrackedSteps[name])
            {
                foreach (var (_, reason) in run.Outputs)
                {
                    Assert.True(
                        reason is IncrementalStepRunReason.Cached or IncrementalStepRunReason.Unchanged,
                        $"Step '{name}' output was {reason}.");
                }
            }
        }

        var outputs = result.TrackedOutputSteps.SelectMany(step => step.Value).SelectMany(run => run.Outputs).ToList();
        Assert.NotEmpty(outputs);
        Assert.All(outputs, output => Assert.True(
            output.Reason is IncrementalStepRunReason.Cached or IncrementalStepRunReason.Unchanged,
            $"Source output was {output.Reason}."));
    }
}
