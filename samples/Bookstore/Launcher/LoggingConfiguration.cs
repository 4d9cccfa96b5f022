using PersistentServices;

namespace Bookstore.Launcher;

/// <summary>
/// The optimization levels of [Phoenix/App Table 8], and the fourth the paper described but did not build (§3.5,
/// §5.5.2), as library options every service of the deployment gets.
/// </summary>
internal sealed record LoggingConfiguration(string Key, string Title, CallLogging Logging, bool UseRoles, string PaperRow, int? PaperForces, int? PaperMilliseconds)
{
    public static readonly IReadOnlyList<LoggingConfiguration> All =
    [
        new("a", "every component persistent, force on every message", CallLogging.ForceEveryMessage, false, "Baseline", 64, 589),
        new("b", "optimized persistent logging (force before each call)", CallLogging.ForceBeforeEachCall, false, "Optimized logging for Persistent Components", 46, 382),
        new("c", "roles and read-only methods", CallLogging.ForceBeforeEachCall, true, "Specialized components and read-only methods", 34, 296),
        new("d", "roles, read-only methods and the multi-call optimization", CallLogging.MultiCall, true, "(§5.5.2: described, not measured)", null, null),
    ];

    public static LoggingConfiguration Parse(string key)
        => All.FirstOrDefault(c => string.Equals(c.Key, key, StringComparison.OrdinalIgnoreCase))
           ?? throw new ArgumentException($"--config {key}: one of {string.Join(", ", All.Select(c => c.Key))}");
}
