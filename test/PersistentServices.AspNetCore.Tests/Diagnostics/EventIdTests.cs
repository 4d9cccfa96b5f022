using System.Text.RegularExpressions;

namespace PersistentServices.AspNetCore.Tests.Diagnostics;

/// <summary>
/// Every <c>[LoggerMessage]</c> event id of the packages is used once, and lies in its package's range (docs/architecture.md):
/// an operator who filters or alerts on an id must get one kind of event. Issue 33 found 1110 and 1350 used twice.
/// </summary>
public sealed partial class EventIdTests
{
    [GeneratedRegex(@"LoggerMessage\(\s*(?:EventId\s*=\s*)?(\d+)")]
    private static partial Regex EventId();

    private static string Src()
    {
        for (var directory = new DirectoryInfo(AppContext.BaseDirectory); directory is not null; directory = directory.Parent)
        {
            if (File.Exists(Path.Combine(directory.FullName, "PersistentServices.sln")))
            {
                return Path.Combine(directory.FullName, "src");
            }
        }

        throw new InvalidOperationException("The repository's PersistentServices.sln was not found above " + AppContext.BaseDirectory);
    }

    [Fact]
    public void EveryEventIdIsUsedOnce_AndInItsPackagesRange()
    {
        var uses = new List<(int Id, string Where)>();
        foreach (var file in Directory.EnumerateFiles(Src(), "*.cs", SearchOption.AllDirectories))
        {
            var relative = Path.GetRelativePath(Src(), file);
            if (relative.Split(Path.DirectorySeparatorChar).Any(part => part is "obj" or "bin"))
            {
                continue;
            }

            var text = File.ReadAllText(file);
            foreach (Match match in EventId().Matches(text))
            {
                var line = text.AsSpan(0, match.Index).Count('\n') + 1;
                uses.Add((int.Parse(match.Groups[1].Value, System.Globalization.CultureInfo.InvariantCulture), $"{relative}:{line}"));
            }
        }

        Assert.True(uses.Count > 50, $"only {uses.Count} [LoggerMessage] uses found under {Src()}");
        var twice = uses.GroupBy(u => u.Id).Where(g => g.Count() > 1).Select(g => $"{g.Key}: {string.Join(", ", g.Select(u => u.Where))}").ToList();
        Assert.True(twice.Count == 0, "event ids used more than once:\n" + string.Join("\n", twice));

        // The client package has 1350-1369 and the gateway package 1400-1419; every other package stays out of them.
        var outOfRange = uses.Where(u => u.Where.StartsWith("PersistentServices.Client", StringComparison.Ordinal) != (u.Id is >= 1350 and <= 1369)
                                         || u.Where.StartsWith("PersistentServices.Gateway", StringComparison.Ordinal) != (u.Id is >= 1400 and <= 1419))
            .Select(u => $"{u.Id} at {u.Where}").ToList();
        Assert.True(outOfRange.Count == 0, "event ids outside their package's range (docs/architecture.md):\n" + string.Join("\n", outOfRange));
    }
}
