using System.Text.RegularExpressions;

namespace PersistentServices.AspNetCore.Tests.Diagnostics;

/// <summary>
/// docs/architecture.md stays true to the tree (issue 33): its Layout block names every folder of every project under
/// <c>src/</c> (and the tests and samples) and no folder that is gone; every type or folder its glossary points at exists.
/// </summary>
public sealed partial class ArchitectureDocTests
{
    [GeneratedRegex(@"\s{2,}")]
    private static partial Regex TwoSpaces();

    [GeneratedRegex(@"^message\s+([A-Za-z]+)", RegexOptions.Multiline)]
    private static partial Regex ProtoMessage();

    [GeneratedRegex(@"`([A-Z][A-Za-z]+(?:/[A-Z][A-Za-z]+)?)`")]
    private static partial Regex CodeName();

    [GeneratedRegex(@"^\s*(?:\[[^\]]*\]\s*)*(?:(?:public|internal|private|file|static|sealed|abstract|readonly|partial|unsafe)\s+)*(?:class|record struct|record class|record|struct|interface|enum)\s+([A-Za-z]+)", RegexOptions.Multiline)]
    private static partial Regex TypeDeclaration();

    private static string Root()
    {
        for (var directory = new DirectoryInfo(AppContext.BaseDirectory); directory is not null; directory = directory.Parent)
        {
            if (File.Exists(Path.Combine(directory.FullName, "PersistentServices.sln")))
            {
                return directory.FullName;
            }
        }

        throw new InvalidOperationException("The repository's PersistentServices.sln was not found above " + AppContext.BaseDirectory);
    }

    private static string Section(string heading)
    {
        var text = File.ReadAllText(Path.Combine(Root(), "docs", "architecture.md"));
        var start = text.IndexOf("\n## " + heading + "\n", StringComparison.Ordinal);
        Assert.True(start >= 0, $"docs/architecture.md has no '## {heading}' section");
        var end = text.IndexOf("\n## ", start + 4, StringComparison.Ordinal);
        return end < 0 ? text[start..] : text[start..end];
    }

    /// <summary>The Layout block's entries as paths ("src/PersistentServices.Core/Log"), from their indentation.</summary>
    private static HashSet<string> LayoutPaths()
    {
        var block = Section("Layout");
        var open = block.IndexOf("```\n", StringComparison.Ordinal) + 4;
        var lines = block[open..block.IndexOf("```", open, StringComparison.Ordinal)].Split('\n');
        var paths = new HashSet<string>(StringComparer.Ordinal);
        var stack = new List<(int Indent, string Name)>();
        foreach (var line in lines)
        {
            var indent = line.Length - line.TrimStart().Length;
            if (line.Trim().Length == 0 || indent >= 30)
            {
                continue; // a blank line, or a description continued on the next line
            }

            var names = TwoSpaces().Split(line.Trim())[0].Split(", ");
            stack.RemoveAll(entry => entry.Indent >= indent);
            foreach (var name in names)
            {
                // "Client.Tests/" beside the full names of its siblings: the prefix is theirs.
                var full = name.StartsWith("PersistentServices.", StringComparison.Ordinal) || stack.Count == 0 || !stack[^1].Name.Equals("test", StringComparison.Ordinal)
                    ? name
                    : "PersistentServices." + name;
                var parts = full.TrimEnd('/').Split('/');
                for (var i = 1; i <= parts.Length; i++)
                {
                    // "Records/records.proto" names the folder Records too.
                    paths.Add(string.Join('/', stack.Select(entry => entry.Name).Concat(parts[..i])));
                }
            }

            stack.Add((indent, names[0].TrimEnd('/')));
        }

        return paths;
    }

    private static IEnumerable<string> Folders(string relative, int depth)
    {
        var root = Path.Combine(Root(), relative);
        return Directory.EnumerateDirectories(root, "*", new EnumerationOptions { RecurseSubdirectories = true, MaxRecursionDepth = depth - 1 })
            .Select(path => Path.GetRelativePath(Root(), path).Replace(Path.DirectorySeparatorChar, '/'))
            .Where(path => !path.Split('/').Any(part => part is "bin" or "obj" or "Properties" || part.StartsWith('.')))
            .Order(StringComparer.Ordinal);
    }

    [Fact]
    public void Layout_NamesEveryFolderOfTheSourceProjects_TheTestsAndTheSamples()
    {
        var layout = LayoutPaths();
        var required = Folders("src", 3).Concat(Folders("test", 1)).Concat(Folders("samples", 1)).ToList();
        var missing = required.Where(path => !layout.Contains(path)).ToList();
        Assert.True(missing.Count == 0, "folders missing from docs/architecture.md's Layout block:\n" + string.Join("\n", missing));
    }

    [Fact]
    public void Layout_NamesNothingThatIsGone()
    {
        var gone = LayoutPaths()
            .Where(path => !Directory.Exists(Path.Combine(Root(), path)) && !File.Exists(Path.Combine(Root(), path)))
            .ToList();
        Assert.True(gone.Count == 0, "docs/architecture.md's Layout block names what the tree does not have:\n" + string.Join("\n", gone));
    }

    [Fact]
    public void Glossary_PointsOnlyAtTypesAndFoldersThatExist()
    {
        var src = Path.Combine(Root(), "src");
        bool Ours(string path) => !Path.GetRelativePath(src, path).Split(Path.DirectorySeparatorChar).Any(part => part is "bin" or "obj");
        var types = Directory.EnumerateFiles(src, "*.cs", SearchOption.AllDirectories).Where(Ours)
            .SelectMany(file => TypeDeclaration().Matches(File.ReadAllText(file)).Select(m => m.Groups[1].Value))
            .Concat(Directory.EnumerateFiles(src, "*.proto", SearchOption.AllDirectories).Where(Ours)
                .SelectMany(file => ProtoMessage().Matches(File.ReadAllText(file)).Select(m => m.Groups[1].Value)))
            .ToHashSet(StringComparer.Ordinal);
        var folders = Directory.EnumerateDirectories(src, "*", SearchOption.AllDirectories).Where(Ours).Select(Path.GetFileName).ToHashSet(StringComparer.Ordinal);

        var glossary = Section("Glossary");
        var names = glossary.Split('\n')
            .Where(line => line.StartsWith("| ", StringComparison.Ordinal) && line.Split('|').Length > 4)
            .SelectMany(line => CodeName().Matches(line.Split('|')[3]).Select(m => m.Groups[1].Value))
            .ToList();
        Assert.True(names.Count > 20, $"only {names.Count} code names found in the glossary");

        var unknown = names.Where(name =>
        {
            var parts = name.Split('/');
            var last = parts[^1];
            return parts.Length == 2 ? !folders.Contains(parts[0]) || !types.Contains(last) : !types.Contains(last) && !folders.Contains(last);
        }).Distinct().ToList();
        Assert.True(unknown.Count == 0, "the glossary of docs/architecture.md names types or folders that do not exist:\n" + string.Join("\n", unknown));
    }
}
