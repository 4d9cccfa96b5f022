using System.Reflection;

namespace PersistentServices.Testing.Tests;

/// <summary>Paths into the repository this test assembly was built from.</summary>
internal static class Repository
{
    public static readonly string Root = typeof(Repository).Assembly.GetCustomAttributes<AssemblyMetadataAttribute>()
        .Single(a => a.Key == "RepositoryRoot").Value!;

    public static string File(string relativePath) => Path.Combine(Root, relativePath);

    public static string Read(string relativePath) => System.IO.File.ReadAllText(File(relativePath)).Replace("\r\n", "\n", StringComparison.Ordinal);
}
