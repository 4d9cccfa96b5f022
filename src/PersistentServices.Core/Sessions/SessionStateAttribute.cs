namespace PersistentServices;

/// <summary>
/// Marks a <c>partial</c> property as per-session state: each client session sees its own value. The source generator
/// implements the property; values are not logged but recovered by replaying the session's logged requests
/// ([MSP §3.2]). Declare it in a non-generic partial class:
/// <code>[SessionState] public partial List&lt;string&gt;? Cart { get; set; }</code>
/// </summary>
[AttributeUsage(AttributeTargets.Property, AllowMultiple = false, Inherited = false)]
public sealed class SessionStateAttribute : Attribute
{
}
