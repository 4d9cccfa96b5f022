using System.Collections.Immutable;
using Microsoft.CodeAnalysis;

namespace PersistentServices.Generators.Tests.TestSupport;

internal static class DiagnosticAssert
{
    /// <summary>Asserts exactly one diagnostic, with <paramref name="id"/>, on the source text <paramref name="spanText"/>.</summary>
    public static Diagnostic Single(ImmutableArray<Diagnostic> diagnostics, string id, string spanText)
    {
        Assert.True(diagnostics.Length == 1, $"Expected one {id}, got:\n" + string.Join("\n", diagnostics));
        var diagnostic = diagnostics[0];
        Assert.Equal(id, diagnostic.Id);
        Assert.Equal(spanText, SpanText(diagnostic));
        return diagnostic;
    }

    /// <summary>Asserts the diagnostics' ids, in source order.</summary>
    public static void Ids(ImmutableArray<Diagnostic> diagnostics, params string[] ids)
        => Assert.True(
            diagnostics.Select(d => d.Id).SequenceEqual(ids),
            $"Expected [{string.Join(", ", ids)}], got:\n" + string.Join("\n", diagnostics));

    public static void None(ImmutableArray<Diagnostic> diagnostics)
        => Assert.True(diagnostics.IsEmpty, "Expected no diagnostics, got:\n" + string.Join("\n", diagnostics));

    public static string SpanText(Diagnostic diagnostic)
        => diagnostic.Location.SourceTree!.GetText().ToString(diagnostic.Location.SourceSpan);
}
